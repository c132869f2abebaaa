"""What happens when an attempt is interrupted: classify, then fail over, pause, or give up.

- On-Demand with Job Failover: `Running → Pending - failoverinprogress → Running` on a
  hardware fault or a lost node (faulty node cordoned, at most MAX_FAILOVERS), `… →
  Pending - internalerror` when there is no hardware evidence, `Pending - maxretriesexceeded`
  after the last failover.
- Spot: an interruption (capacity reclaimed, a hardware fault, a lost node) pauses the job in
  `Pending - spotinterrupted`; the scheduler resumes it when capacity is free again.
- Otherwise: `Failed`.
Every decision, with its evidence, goes into the job's status reason, history and log stream.
Callers hold the job row lock (select_for_update) inside a transaction.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta

from celery import current_app
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from monitoring.models import LogLine

from .. import actions, console_log
from ..channel.notify import schedule_on_commit, sync_nodes_on_commit
from ..choices import JobStatus, LearningType
from ..environments.preparation import placement_decision
from ..models import HardwareEvent as HardwareEventRow
from ..models import JobAttempt, JobStatusChange, Node, NodeGPU, Placement, TrainingJob
from ..models.attempts import HOLDING_STATES
from . import goodput, spot_fallback
from .faults import Decision, ExitEvidence, HardwareEvent, Verdict, classify, recheck

log = logging.getLogger(__name__)
MAX_FAILOVERS = 3
RECHECK_SECONDS = 5
LOG_TAIL_LINES = 40


def evidence_for(placement: Placement, node_lost: bool = False, agent_restarted: bool = False,
                 lost_how: str = "") -> ExitEvidence:
    """Exit code, log tail and the node's hardware events since the attempt began."""
    attempt = placement.attempt
    events = HardwareEventRow.objects.filter(
        node_id=placement.node_id, occurred_at__gte=attempt.created_at - timedelta(seconds=5),
    )
    hardware = tuple(
        HardwareEvent(e.kind, e.gpu_index, e.xid, e.detail) for e in events
        if e.gpu_index is None or e.gpu_index in placement.gpu_indices
    )
    tail = LogLine.objects.filter(job_id=attempt.job_id, stream=placement.role, attempt=attempt.number).order_by("-seq")
    lines = tuple(reversed(list(tail.values_list("text", flat=True)[:LOG_TAIL_LINES])))
    peers_down = tuple(
        Placement.objects.filter(attempt=attempt).exclude(pk=placement.pk)
        .filter(Q(node__isnull=True) | Q(node__connected=False) | Q(node__lost=True))
        .values_list("node_name", flat=True)
    )
    return ExitEvidence(
        exit_code=placement.exit_code, signal=placement.exit_signal, node_lost=node_lost, lost_how=lost_how,
        agent_restarted=agent_restarted,
        node_name=placement.node_name, log_tail=lines, hardware=hardware, peers_down=peers_down,
    )


def interrupted(job: TrainingJob, placement: Placement, evidence: ExitEvidence) -> Decision:
    """An attempt of a Creating/Running job stopped for a reason other than success."""
    decision = placement_decision(placement) or classify(evidence)
    note_fault(job, placement, decision.verdict in PLATFORM_VERDICTS, fault_time(placement, evidence))
    _say(job, placement, f"{placement.role} on {placement.node_name} stopped: {decision.reason}")
    if decision.verdict is Verdict.HARDWARE:
        # the evidence is this node's own; a lost node is excluded by being Lost, not cordoned
        _cordon(placement, decision)
    spot = job.learning_type == LearningType.SPOT
    if decision.verdict is Verdict.IMAGE:
        _give_up(job, JobStatus.IMAGE_PULL_BACKOFF, decision.reason)
    elif spot and decision.verdict in (Verdict.HARDWARE, Verdict.INFRA):
        pause_spot(job, f"interrupted by {decision.reason}")
    elif spot or not job.failover_enabled:
        _give_up(job, JobStatus.FAILED, _capitalise(decision.reason))
    else:
        actions.transition(job.pk, JobStatus.FAILOVER_IN_PROGRESS,
                           f"Assessing failover feasibility: {decision.reason}")
        job.refresh_from_db(fields=["status", "status_reason", "failover_count"])
        if decision.verdict is Verdict.AMBIGUOUS:
            placement_id = placement.pk
            transaction.on_commit(lambda: _ask_recheck(job.pk, placement_id))
        else:
            decide(job, decision)
    _stop_attempt(job)
    return decision


# the platform's faults (a user's code or image is theirs; an ambiguous kill is the user's until
# its recheck finds a hardware fault or a dead node)
PLATFORM_VERDICTS = (Verdict.HARDWARE, Verdict.INFRA)


def fault_time(placement: Placement, evidence: ExitEvidence) -> datetime:
    """When the fault that ended `placement` happened, as well as the console knows: a GPU's
    first hardware event, a lost node's closed connection or last heartbeat, else the exit."""
    candidates = []
    if evidence.hardware:
        first = HardwareEventRow.objects.filter(
            node_id=placement.node_id, occurred_at__gte=placement.attempt.created_at - timedelta(seconds=5),
        ).order_by("occurred_at").values_list("occurred_at", flat=True).first()
        candidates.append(first)
    if evidence.node_lost and placement.node_id is not None:
        node = Node.objects.filter(pk=placement.node_id).values("closed_at", "last_sent_at").first() or {}
        candidates.append(node.get("closed_at") or node.get("last_sent_at"))
    found = [t for t in candidates if t is not None]
    return min(found) if found else (placement.ended_at or timezone.now())


def note_fault(job: TrainingJob, placement: Placement | None, platform: bool, at: datetime) -> None:
    """Write down what ended the job's current attempt (the first fault counts), for the
    time-lost breakdown and staff's per-node fault counts (jobs.recovery.goodput)."""
    JobAttempt.objects.filter(job=job, number=job.current_attempt, fault_by="").update(
        fault_at=at, fault_by=goodput.PLATFORM if platform else goodput.USER,
        fault_node=placement.node_name if placement is not None else "",
    )


def _ask_recheck(job_id: int, placement_id: int) -> None:
    """The quick path of the recheck; `finish_overdue_assessments` makes up for a lost task."""
    try:
        current_app.send_task("jobs.tasks.recheck_interruption", (job_id, placement_id), countdown=RECHECK_SECONDS)
    except Exception:
        log.warning("could not queue the recheck of job %s; the assessment sweep does it", job_id, exc_info=True)


def finish_overdue_assessments(now: datetime | None = None) -> list[int]:
    """Level-triggered: every job still assessing a failover well past its recheck time is
    rechecked now (its delayed task was lost with a worker or a broker). Returns the job ids."""
    now = now or timezone.now()
    done = []
    attempts = JobAttempt.objects.filter(
        job__status=JobStatus.FAILOVER_IN_PROGRESS, ended_at__isnull=True,
        stop_requested_at__lt=now - timedelta(seconds=RECHECK_SECONDS * 3),
    ).values_list("job_id", "number")
    for job_id, number in attempts:
        with transaction.atomic():
            job = TrainingJob.objects.select_for_update().filter(pk=job_id, current_attempt=number).first()
            placement = (
                Placement.objects.select_related("attempt")
                .filter(attempt__job_id=job_id, attempt__number=number)
                .exclude(state__in=HOLDING_STATES).order_by("ended_at", "node_rank").first()
            )
            if job is not None and placement is not None:
                recheck_later(job, placement)
                done.append(job_id)
    return done


def recheck_later(job: TrainingJob, placement: Placement) -> None:
    """The ambiguous kill, seen again: new evidence or a dead node means failover."""
    if job.status != JobStatus.FAILOVER_IN_PROGRESS or job.current_attempt != placement.attempt.number:
        return
    evidence = evidence_for(placement)
    first = classify(dataclasses.replace(evidence, peers_down=(), hardware=()))
    node = Node.objects.filter(pk=placement.node_id).first()
    alive = bool(node and node.connected and not node.lost)
    decision = recheck(first, evidence.hardware, alive, placement.node_name, evidence.peers_down)
    _say(job, placement, f"looked again after {RECHECK_SECONDS} s: {decision.reason}")
    if decision.verdict is Verdict.HARDWARE:
        _cordon(placement, decision)
    if decision.verdict in PLATFORM_VERDICTS:  # it was the platform's after all
        JobAttempt.objects.filter(job=job, number=job.current_attempt).update(fault_by=goodput.PLATFORM)
    decide(job, decision)


def decide(job: TrainingJob, decision: Decision) -> None:
    """The end of `Pending - failoverinprogress`'s assessment: reject, give up, or reallocate."""
    if decision.verdict not in (Verdict.HARDWARE, Verdict.INFRA):
        # what happened first, in the user's words; then why failover does not help
        _give_up(job, JobStatus.INTERNAL_ERROR, f"{_capitalise(decision.reason)}: not a hardware fault, so no failover")
        return
    if job.failover_count >= MAX_FAILOVERS:
        _give_up(job, JobStatus.MAX_RETRIES_EXCEEDED,
                 f"{MAX_FAILOVERS} failovers done; not reallocating after {decision.reason}")
        return
    actions.count_failover(job.pk, f"Reallocating to healthy nodes after {decision.reason} "
                                   f"(failover {job.failover_count + 1} of {MAX_FAILOVERS})")
    end_attempt(job, decision.reason)
    schedule_on_commit()


def pause_spot(job: TrainingJob, reason: str) -> None:
    """Interrupt a spot job: SIGTERM (its checkpoint becomes durable in the grace), then wait."""
    note_fault(job, None, True, timezone.now())  # capacity reclaimed (a fault's own note came first)
    actions.transition(job.pk, JobStatus.SPOT_INTERRUPTED, _capitalise(reason) + "; resumes from its newest checkpoint when capacity returns")
    end_attempt(job, reason)
    for stream in _streams(job):
        console_log.write(job.pk, stream, job.current_attempt, f"[SPOT] Interrupted: {reason}; the command gets SIGTERM and its grace period to checkpoint")
    _stop_attempt(job)


def fall_back_due(jobs: list[TrainingJob], now: datetime) -> list[TrainingJob]:
    """Interrupted spot jobs among `jobs` whose fallback budget ran out move to on-demand
    capacity (jobs.recovery.spot_fallback); they are updated in place and returned. Counted from their
    newest interruption: one query for all of them."""
    budgeted = [job for job in jobs if job.status == JobStatus.SPOT_INTERRUPTED and job.runs_as_spot
                and job.spot_fallback_after_minutes is not None]
    if not budgeted:
        return []
    since = dict(
        JobStatusChange.objects.filter(job__in=budgeted, new_status=JobStatus.SPOT_INTERRUPTED)
        .exclude(old_status=JobStatus.SPOT_INTERRUPTED).values("job_id")
        .annotate(at=Max("created_at")).values_list("job_id", "at")
    )
    fell = []
    for job in budgeted:
        if not spot_fallback.due(since.get(job.pk), job.spot_fallback_after_minutes, now):
            continue
        price = job.server_type.on_demand_price_per_gpu_hour
        reason = spot_fallback.reason(job.spot_fallback_after_minutes or 0, f"{price:.4f}".rstrip("0").rstrip("."))
        moved = actions.fall_back_to_on_demand(job.pk, reason, price, now)
        if moved is None:
            continue
        job.refresh_from_db(fields=["on_demand_since", "on_demand_price_per_gpu_hour", "status_reason"])  # as the action left it
        for stream in _streams(job):
            console_log.write(job.pk, stream, job.current_attempt, f"[SPOT] {reason}")
        fell.append(job)
    return fell


def _give_up(job: TrainingJob, status: str, reason: str) -> None:
    end_attempt(job, reason)
    actions.transition(job.pk, status, reason)


def end_attempt(job: TrainingJob, cause: str) -> None:
    """Close the job's current attempt with its cause (once; a later call changes nothing)."""
    JobAttempt.objects.filter(job=job, number=job.current_attempt, ended_at__isnull=True).update(
        ended_at=timezone.now(), cause=cause[:500],
    )


def _stop_attempt(job: TrainingJob) -> None:
    """The job left Creating/Running: its agents drop the placements (SIGTERM → grace → SIGKILL)."""
    sync_nodes_on_commit(Placement.objects.filter(
        attempt__job=job, attempt__number=job.current_attempt, state__in=HOLDING_STATES,
    ).values_list("node_id", flat=True))
    schedule_on_commit()


def _cordon(placement: Placement, decision: Decision) -> None:
    reason = f"{decision.reason} (job {placement.attempt.job_id}, attempt {placement.attempt.number})"
    actions.set_cordon(placement.node_id, True, reason, keep_reason=True)
    bad = {e.gpu_index for e in evidence_for(placement).hardware if e.gpu_index is not None}
    NodeGPU.objects.filter(node_id=placement.node_id, index__in=bad).update(healthy=False)


def _streams(job: TrainingJob) -> list[str]:
    return list(Placement.objects.filter(attempt__job=job, attempt__number=job.current_attempt).values_list("role", flat=True))


def _say(job: TrainingJob, placement: Placement, text: str) -> None:
    console_log.write(job.pk, placement.role, placement.attempt.number, f"[CONSOLE] {text}")


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:]
