"""Submit waiting jobs to their Slurm cluster, poll what Slurm says, and act on it.

One pass per cluster (jobs.slurm.tasks.sync_slurm, every scheduler tick and on demand): one
`GET /jobs` for the whole cluster, one read of the job completion records, then for each
unfinished Slurm job the plain decision of jobs.slurm.states, carried out here through
jobs.actions under the job's row lock. HTTP calls that change Slurm (submit, cancel) happen
outside row locks where they can; a failed call is retried on the next pass.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from .. import actions
from ..choices import WAITING_STATUSES, JobStatus, LearningType
from ..models import TrainingJob
from ..models.jobs import AWAITING_CHECKPOINT_COPY
from ..recovery import failover
from . import jobcomp, runs
from .adapters import SlurmJobView
from .batch_script import comment_is_from, job_id_from_name
from .client import SlurmClient, SlurmError
from .jobcomp import CompletionRecord
from .models import SlurmCluster, SlurmJob, SlurmRun
from .states import FINAL_STATES, RUNNING_STATES, WAITING_STATES, Action, Local, Shape, Step, decide, is_held
from .submit import record_submission, submit_waiting

log = logging.getLogger(__name__)
CANCEL_RESEND_SECONDS = 30  # a cancel Slurm did not act on is sent again after this long


def _shape(cluster: SlurmCluster, job: TrainingJob) -> Shape:
    return Shape(job.node_count, job.gpus_per_node, cluster.partition_for(job.learning_type))


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:]


# -- one pass ------------------------------------------------------------------------------------
def sync_all() -> None:
    for cluster in SlurmCluster.objects.filter(enabled=True).select_related("server_type"):
        try:
            sync_cluster(cluster)
        except Exception:  # one broken cluster must not stop the others
            log.exception("Slurm cluster %s: the sync pass failed", cluster.name)


def sync_cluster(cluster: SlurmCluster) -> None:
    client = cluster.client()
    # a job never submitted has nothing Slurm could hold for it: it goes first, without waiting
    # for the listing (one slurmrestd round trip less between a job's creation and Slurm)
    submit_waiting(cluster, client, None)
    try:
        views = {view.job_id: view for view in client.jobs()}
    except SlurmError as exc:
        _cluster_down(cluster, str(exc))
        return
    SlurmCluster.objects.filter(pk=cluster.pk).update(last_checked_at=timezone.now(), last_error="")
    cancel_orphans_now(cluster)
    submit_waiting(cluster, client, views)
    reconcile(cluster, client, views)
    active = list(SlurmJob.objects.filter(cluster=cluster, finished_at__isnull=True, slurm_job_id__isnull=False)
                  .select_related("job").only("pk", "slurm_job_id", "state", "reason", "restart_count", "job__status"))
    records = jobcomp.read(cluster.jobcomp_path, [sj.slurm_job_id for sj in active])
    for slurm_job in active:
        view = views.get(slurm_job.slurm_job_id)
        if unchanged(slurm_job, view):
            continue
        try:
            if view is None:
                view = client.job(slurm_job.slurm_job_id)  # None: slurmctld forgot it (MinJobAge)
            found = records.get(slurm_job.slurm_job_id, [])
            if view is None and not found and cluster.accounting:
                found = _from_accounting(client, slurm_job.slurm_job_id)  # no completion record: sacct's
            apply(slurm_job.pk, view, found, client)
        except SlurmError as exc:
            log.warning("Slurm job %s: %s", slurm_job, exc)
    if cluster.accounting:
        account_ended(cluster, client)


ENDING_WINDOW = timedelta(seconds=30)  # how long after its launchers' exits a run is polled for its end


def runs_ending() -> bool:
    """A run whose launchers have all reported their exit (within ENDING_WINDOW) while the console
    still waits for Slurm to end it: the batch script ends a moment later, and the job's outcome
    (Completed, Failed) waits only for the pass that sees it."""
    since = timezone.now() - ENDING_WINDOW
    return (SlurmRun.objects.filter(ended_at__isnull=True, slurm_job__finished_at__isnull=True, slurm_job__cluster__enabled=True,
                                    attempt__placements__ended_at__gte=since)
            .exclude(attempt__placements__ended_at__isnull=True).exists())


ACCOUNTING_WINDOW = timedelta(hours=1)  # how long after its end a job's accounting record is waited for
ACCOUNTING_BATCH = 20  # records read per pass


def _from_accounting(client: SlurmClient, slurm_job_id: int) -> list[CompletionRecord]:
    """The last run's outcome from slurmdbd, for a job slurmctld forgot and the completion records
    do not name (22.05 reports no exit code there: the failure text goes without one)."""
    seen = client.accounting(slurm_job_id)
    if seen is None or seen.state not in FINAL_STATES:
        return []
    return [CompletionRecord(slurm_job_id, seen.state, seen.nodes, seen.start_time, seen.end_time, None, None)]


def account_ended(cluster: SlurmCluster, client: SlurmClient) -> int:
    """Ended jobs' usage as Slurm accounted it (account, elapsed time, allocated TRES): shown with
    the Slurm job, and the figure the console's run time is checked against. Returns how many."""
    since = timezone.now() - ACCOUNTING_WINDOW
    waiting = SlurmJob.objects.filter(cluster=cluster, accounted_at__isnull=True, slurm_job_id__isnull=False,
                                      finished_at__gte=since).order_by("finished_at")[:ACCOUNTING_BATCH]
    done = 0
    for slurm_job in waiting:
        try:
            seen = client.accounting(slurm_job.slurm_job_id)
        except SlurmError as exc:
            log.warning("Slurm cluster %s: no accounting record of job %s: %s", cluster.name, slurm_job.slurm_job_id, exc)
            return done
        if seen is None or seen.state not in FINAL_STATES:
            continue  # slurmdbd has not heard of its end yet
        SlurmJob.objects.filter(pk=slurm_job.pk).update(
            accounted_at=timezone.now(), accounted_state=seen.state[:32], elapsed_seconds=seen.elapsed_seconds,
            allocated_tres=seen.allocated_tres[:300], account=seen.account[:64] or slurm_job.account,
        )
        done += 1
    return done


def unchanged(slurm_job: SlurmJob, view: SlurmJobView | None) -> bool:
    """Nothing to do: Slurm says what it said last time, and the job is queued or runs as the console
    already knows. Keeps a pass over hundreds of queued jobs to one query and one GET."""
    if view is None or slurm_job.job is None:
        return False
    said_before = (view.state, said(view), view.restart_count) == (slurm_job.state, slurm_job.reason, slurm_job.restart_count)
    steady = (view.state in WAITING_STATES and slurm_job.job.status in WAITING_STATUSES) or (
        view.state in RUNNING_STATES and slurm_job.job.status in (JobStatus.CREATING, JobStatus.RUNNING))
    return said_before and steady


def said(view: SlurmJobView) -> str:
    """The reason as stored: Slurm's code and, when it has one, its own sentence (a drained node
    turns "Resources" into "Nodes required for job are DOWN, DRAINED…" without a new code)."""
    return (f"{view.reason}: {view.description}" if view.description else view.reason)[:200]


def _cluster_down(cluster: SlurmCluster, error: str) -> None:
    log.warning("Slurm cluster %s: %s", cluster.name, error)
    SlurmCluster.objects.filter(pk=cluster.pk).update(last_checked_at=timezone.now(), last_error=error[:500])
    waiting = TrainingJob.objects.filter(server_type=cluster.server_type, status=JobStatus.PENDING,
                                         slurm__slurm_job_id__isnull=True).exclude(AWAITING_CHECKPOINT_COPY)
    for job_id in waiting.values_list("pk", flat=True):
        actions.set_waiting_reason(job_id, f"Waiting for Slurm cluster {cluster.name}: {error}; retrying"[:500])


# -- applying what Slurm says ------------------------------------------------------------------
def _record_for(records: list[CompletionRecord], index: int | None) -> CompletionRecord | None:
    """The completion record of run `index` (each ended run leaves one, in order)."""
    if index is None:
        return records[-1] if records else None
    return records[index] if 0 <= index < len(records) else None


@transaction.atomic
def apply(slurm_job_pk: int, view: SlurmJobView | None, records: list[CompletionRecord], client: SlurmClient) -> Step | None:
    slurm_job = SlurmJob.objects.select_for_update().select_related("cluster").filter(pk=slurm_job_pk).first()
    if slurm_job is None or slurm_job.finished_at is not None:
        return None
    if view is not None:
        SlurmJob.objects.filter(pk=slurm_job.pk).update(state=view.state[:32], reason=said(view), restart_count=view.restart_count)
    if slurm_job.job_id is None:
        _orphan(slurm_job, view, client)
        return None
    job = TrainingJob.objects.select_for_update().select_related("server_type").get(pk=slurm_job.job_id)
    run = runs.current_run(job)
    local = Local(
        status=job.status, spot=job.learning_type == LearningType.SPOT, failover_enabled=job.failover_enabled,
        failover_count=job.failover_count, run_restart=run.restart_count if run else None,
        run_open=run is not None and run.attempt.ended_at is None,
    )
    index = run.restart_count if run is not None and local.run_open else (view.restart_count if view is not None else None)
    record = _record_for(records, index)
    down = _down_nodes(client, record)
    step = decide(view, local, _shape(slurm_job.cluster, job), record, down)
    _carry_out(step, slurm_job, job, run, view, record, client)
    return step


def _down_nodes(client: SlurmClient, record: CompletionRecord | None) -> tuple[str, ...]:
    """Nodes of a NODE_FAIL'ed run that slurmctld marks down: the ones that failed."""
    if record is None or record.state != "NODE_FAIL":
        return ()
    try:
        states = client.node_states()
    except SlurmError:
        return ()
    return tuple(n for n in record.nodes if any(word in states.get(n, "").lower() for word in ("down", "fail", "drain")))


def _carry_out(step: Step, slurm_job: SlurmJob, job: TrainingJob, run: SlurmRun | None, view: SlurmJobView | None,
               record: CompletionRecord | None, client: SlurmClient) -> None:
    cluster = slurm_job.cluster
    action = step.action
    if action is Action.WAIT:
        text = _capitalise(f"Slurm job {slurm_job.slurm_job_id} on {cluster.name}: {step.reason}")[:500]
        statuses: tuple[str, ...] = actions.REASON_REWRITABLE
        if view is not None and is_held(view.state, view.reason, view.description):
            # a failover Slurm requeued and then held would otherwise keep saying "Reallocating…"
            statuses += (JobStatus.FAILOVER_IN_PROGRESS,)
        actions.set_waiting_reason(job.pk, text, statuses)
    elif action is Action.START_RUN:
        _start_run(slurm_job, job, view, client)
    elif action is Action.COMPLETE:
        if run is None or run.attempt.ended_at is not None:
            run = _start_run(slurm_job, job, view, client, record)  # ended before a poll saw it run
        _close(run, view, record)
        placements = run.attempt.placements.all()
        outputs = sorted({p.output_url.rsplit("/", 2)[0] for p in placements if p.output_url})
        failover.end_attempt(job, "Completed")
        actions.complete_job(job.pk, step.reason, outputs[0] + "/" if outputs else "")
        _finished(slurm_job)
    elif action is Action.FAIL:
        open_run = run if run is not None and run.attempt.ended_at is None else None
        state = record.state if record is not None else (view.state if view is not None else "")
        # a command that failed: name the node and its evidence; other states say it all themselves
        reason = runs.failure_reason(open_run, step.reason) if state == "FAILED" else _capitalise(step.reason)
        if state == "FAILED" and run is None:
            reason = (f"The batch script failed before the step launchers started ({step.reason}); its output is "
                      f"{cluster.work_dir.rstrip('/')}/slurm-{slurm_job.slurm_job_id}.out on the job's first node")
        if open_run is not None:
            _close(open_run, view, record)
        failover.end_attempt(job, step.reason)
        runs.say(job, f"[SLURM] {reason}")
        actions.transition(job.pk, JobStatus.FAILED, reason[:500])
        _finished(slurm_job)
        if view is not None and view.state not in FINAL_STATES:
            _cancel(slurm_job, client, force=True)  # e.g. requeued although Job Failover is off
    elif action in (Action.FAILOVER, Action.PAUSE, Action.MAX_RETRIES):
        _interrupted(step, slurm_job, job, run, view, record, client)
    elif action is Action.CANCEL:
        _cancel(slurm_job, client)
    elif action is Action.REMOVE:
        if run is not None and run.ended_at is None:
            _close(run, view, record)
        _finished(slurm_job)
        actions.remove_job(job, "Deleted by the user; Slurm ended the job")


def _start_run(slurm_job: SlurmJob, job: TrainingJob, view: SlurmJobView | None, client: SlurmClient,
               record: CompletionRecord | None = None) -> SlurmRun:
    nodes = view.nodes if view is not None and view.nodes else (record.nodes if record is not None else ())
    restart = view.restart_count if view is not None else 0
    started = view.start_time if view is not None else (record.start if record is not None else None)
    master = nodes[0] if nodes else ""
    try:
        master_addr = (client.node_address(master) if master else None) or master
    except SlurmError:
        master_addr = master  # the node's name resolves on a real cluster
    return runs.begin_run(slurm_job, job, restart, nodes or ("unknown",), started, master_addr)


def _close(run: SlurmRun, view: SlurmJobView | None, record: CompletionRecord | None) -> None:
    ended = (record.end if record is not None else None) or (view.end_time if view is not None else None)
    state = record.state if record is not None else (view.state if view is not None else "")
    runs.close_run(run, state, ended, record.exit_code if record else None, record.exit_signal if record else None)


def _interrupted(step: Step, slurm_job: SlurmJob, job: TrainingJob, run: SlurmRun | None, view: SlurmJobView | None,
                 record: CompletionRecord | None, client: SlurmClient) -> None:
    """Slurm requeued the run: fail over, pause the spot job, or give up after the last failover."""
    if run is not None:
        _close(run, None, record)
    cause = step.reason
    if step.action is Action.PAUSE:
        failover.end_attempt(job, cause)
        runs.say(job, f"[SPOT] Interrupted: {cause}; Slurm requeued the job, it resumes from its newest checkpoint")
        actions.transition(job.pk, JobStatus.SPOT_INTERRUPTED,
                           _capitalise(cause) + "; resumes from its newest checkpoint when Slurm starts it again")
        return
    if step.action is Action.MAX_RETRIES:
        failover.end_attempt(job, cause)
        runs.say(job, f"[FAILOVER] {_capitalise(cause)}")
        actions.transition(job.pk, JobStatus.FAILOVER_IN_PROGRESS, f"Assessing failover feasibility: {cause}")
        actions.transition(job.pk, JobStatus.MAX_RETRIES_EXCEEDED, _capitalise(cause))
        _finished(slurm_job)
        _cancel(slurm_job, client, force=True)
        return
    count = job.failover_count + 1
    failover.end_attempt(job, cause)
    runs.say(job, f"[FAILOVER] {_capitalise(cause)}; Slurm requeued the job on healthy nodes "
                  f"(failover {count} of {failover.MAX_FAILOVERS})")
    actions.count_failover(job.pk, f"Reallocating to healthy nodes after {cause}: Slurm requeued the job "
                                   f"(failover {count} of {failover.MAX_FAILOVERS})", JobStatus.FAILOVER_IN_PROGRESS)


def _finished(slurm_job: SlurmJob) -> None:
    SlurmJob.objects.filter(pk=slurm_job.pk).update(finished_at=timezone.now())


def _cancel(slurm_job: SlurmJob, client: SlurmClient, force: bool = False) -> None:
    """scancel, at most every CANCEL_RESEND_SECONDS (SIGTERM to every task, SIGKILL after KillWait)."""
    now = timezone.now()
    if not force and slurm_job.cancel_sent_at and now - slurm_job.cancel_sent_at < timedelta(seconds=CANCEL_RESEND_SECONDS):
        return
    if slurm_job.run_as and slurm_job.run_as != slurm_job.cluster.user_name:
        client = slurm_job.cluster.client(user=slurm_job.run_as)  # a user may cancel their own job; the service user may not
    client.cancel(slurm_job.slurm_job_id)
    SlurmJob.objects.filter(pk=slurm_job.pk).update(cancel_sent_at=now)


def _orphan(slurm_job: SlurmJob, view: SlurmJobView | None, client: SlurmClient) -> None:
    """The Training Job was deleted while Slurm still held its job: cancel it, then stop polling."""
    if view is not None and view.state not in FINAL_STATES:
        _cancel(slurm_job, client)
    else:
        _finished(slurm_job)


def reconcile(cluster: SlurmCluster, client: SlurmClient, views: dict[int, SlurmJobView]) -> list[str]:
    """Strays: jobs this console submitted (its name and comment say so) that Slurm still holds
    queued or running but the console no longer follows — their Training Job was deleted or ended,
    or the row that tracked them is gone or finished. Adopt one the console still waits for (it
    was submitted, but the id never recorded); cancel every other. Returns what it did, as logged."""
    alive = {v.job_id: v for v in views.values() if v.state not in FINAL_STATES and job_id_from_name(v.name)
             and comment_is_from(v.comment, cluster.console_url)}
    if not alive:
        return []
    rows = {row.slurm_job_id: row for row in SlurmJob.objects.filter(cluster=cluster, slurm_job_id__in=list(alive))}
    recently = timezone.now() - timedelta(seconds=CANCEL_RESEND_SECONDS)
    done = []
    for slurm_id, view in alive.items():
        row = rows.get(slurm_id)
        if row is not None and (row.finished_at is None or (row.cancel_sent_at and row.cancel_sent_at > recently)):
            continue  # followed by the poll, or cancelled a moment ago
        training_id = job_id_from_name(view.name)
        waiting = SlurmJob.objects.filter(cluster=cluster, job_id=training_id, slurm_job_id__isnull=True,
                                          finished_at__isnull=True, job__status=JobStatus.PENDING).first()
        if waiting is not None and training_id is not None:  # a job of another name is never waiting
            record_submission(waiting.pk, training_id, slurm_id, cluster)
            done.append(f"adopted Slurm job {slurm_id} as the submission of job {training_id}")
        else:
            try:
                client.cancel(slurm_id)
            except SlurmError as exc:
                log.warning("Slurm cluster %s: cannot cancel stray job %s: %s", cluster.name, slurm_id, exc)
                continue
            SlurmJob.objects.filter(cluster=cluster, slurm_job_id=slurm_id).update(cancel_sent_at=timezone.now())
            done.append(f"cancelled stray Slurm job {slurm_id} ({view.state}) of job {training_id}, which the console "
                        "no longer follows")
    for line in done:
        log.warning("Slurm cluster %s: %s", cluster.name, line)
    return done


def cancel_orphans_now(cluster: SlurmCluster) -> None:
    """Orphans that were never submitted need nothing from Slurm."""
    SlurmJob.objects.filter(cluster=cluster, job__isnull=True, slurm_job_id__isnull=True, finished_at__isnull=True).update(
        finished_at=timezone.now(),
    )
