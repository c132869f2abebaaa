"""Actions on attempts: starting one on nodes, and what agents report about it.

Like jobs.actions, each function is atomic and locks the job row; it writes the job only
through jobs.actions (status, attempt, checkpoint, results).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from nodeagent.protocol import stream_role

from . import actions, agent_writes, console_log, failover
from .choices import JobStatus
from .models import JobAttempt, Node, Placement, PlacementState, TrainingJob
from .models.attempts import HOLDING_STATES, AttemptKind
from .notify import schedule_on_commit, sync_nodes_on_commit
from .scheduling import Assignment, master_port

log = logging.getLogger(__name__)


KIND_BY_STATUS = {
    JobStatus.PENDING: AttemptKind.INITIAL,
    JobStatus.FAILOVER_IN_PROGRESS: AttemptKind.FAILOVER,
    JobStatus.SPOT_INTERRUPTED: AttemptKind.SPOT_RESUME,
}


@transaction.atomic
def start_attempts(placed: Mapping[int, Sequence[Assignment]]) -> dict[int, JobAttempt]:
    """Create the next attempt of each waiting job on its nodes and move it to Creating, in a
    constant number of statements however many jobs a scheduler run places.

    A failed-over or interrupted job resumes from its newest committed checkpoint
    (CKPT_LAST_STEP), and each of its streams gets a marker line that says why and where.
    Returns job id → its new attempt (a job deleted or moved on meanwhile is left out).
    """
    jobs = list(TrainingJob.objects.select_for_update().filter(pk__in=list(placed), status__in=list(KIND_BY_STATUS)))
    if not jobs:
        return {}
    resumed = [job for job in jobs if KIND_BY_STATUS[job.status] != AttemptKind.INITIAL]
    causes = dict(
        JobAttempt.objects.filter(job__in=resumed, number=F("job__current_attempt")).values_list("job_id", "cause")
    ) if resumed else {}
    addresses = dict(Node.objects.filter(pk__in={placed[job.pk][0].node_id for job in jobs}).values_list("pk", "address"))
    attempts = JobAttempt.objects.bulk_create([
        JobAttempt(
            job=job, number=job.current_attempt + 1, kind=KIND_BY_STATUS[job.status],
            master_addr=addresses[placed[job.pk][0].node_id], master_port=master_port(job.pk, job.current_attempt + 1),
            resume_step=job.checkpoint_step if KIND_BY_STATUS[job.status] != AttemptKind.INITIAL else None,
        )
        for job in jobs
    ])
    Placement.objects.bulk_create([
        Placement(attempt=attempt, node_id=a.node_id, node_name=a.node_name, node_rank=rank, role=stream_role(rank),
                  gpu_indices=list(a.gpu_indices))
        for attempt in attempts for rank, a in enumerate(placed[attempt.job_id])
    ])
    reasons = {
        job.pk: _placed_reason(job, attempt, placed[job.pk], causes.get(job.pk, ""))
        for job, attempt in zip(jobs, attempts, strict=True)
    }
    actions.start_attempts(jobs, {attempt.job_id: attempt.number for attempt in attempts}, reasons)
    sync_nodes_on_commit(a.node_id for assignments in placed.values() for a in assignments)
    return {attempt.job_id: attempt for attempt in attempts}


def _placed_reason(job: TrainingJob, attempt: JobAttempt, assignments: Sequence[Assignment], cause: str) -> str:
    nodes = ", ".join(a.node_name for a in assignments)
    if attempt.kind == AttemptKind.INITIAL:
        return f"Attempt {attempt.number} placed on {nodes}; preparing the environment"
    resume = f"checkpoint step {attempt.resume_step}" if attempt.resume_step is not None else "the start (no checkpoint was committed)"
    label = "Failover" if attempt.kind == AttemptKind.FAILOVER else "Spot resume"
    for rank, a in enumerate(assignments):
        console_log.write(job.pk, stream_role(rank), attempt.number,
                          f"[{label.upper()}] ==== attempt {attempt.number - 1} was interrupted ({cause}); "
                          f"attempt {attempt.number} on node {a.node_name}, resuming from {resume} ====", opening=True)
    return f"{label}: attempt {attempt.number} placed on {nodes}, resuming from {resume}"


def start_attempt(job_id: int, assignments: Sequence[Assignment]) -> JobAttempt | None:
    """One job's next attempt (see start_attempts)."""
    return start_attempts({job_id: assignments}).get(job_id)


@dataclass(frozen=True)
class PlacementReport:
    job_id: int
    attempt: int
    role: str
    state: str
    exit_code: int | None = None
    signal: int | None = None
    output_url: str = ""
    message: str = ""
    image_error: bool = False
    failure: str = ""  # protocol.PREPARATION_FAILURES: the agent, not the command, failed


@transaction.atomic
def record_placement(report: PlacementReport, node_id: int) -> str:
    """Apply an agent's report; returns "stale" when the attempt is no longer current (fenced).
    Raises agent_writes.RefusedWrite for a placement that is not this node's."""
    job = TrainingJob.objects.select_for_update().filter(pk=report.job_id).first()
    if job is None or job.current_attempt != report.attempt:
        return "stale"
    placement = (
        Placement.objects.select_for_update()
        .filter(attempt__job=job, attempt__number=report.attempt, role=report.role, node_id=node_id)
        .first()
    )
    if placement is None:
        agent_writes.placement_target(node_id, report.job_id, report.attempt, report.role)  # raises when foreign
        return "stale"
    if placement.state not in HOLDING_STATES:
        return "stale"
    now = timezone.now()
    if report.state in (PlacementState.PREPARING, PlacementState.RUNNING):
        placement.state = report.state
        placement.started_at = placement.started_at or now
        placement.save(update_fields=["state", "started_at"])
        if report.state == PlacementState.RUNNING:
            _maybe_running(job)
        return "ok"
    placement.state = PlacementState.EXITED
    placement.exit_code, placement.exit_signal = report.exit_code, report.signal
    placement.output_url, placement.message = report.output_url, report.message[:1000]
    placement.failure = report.failure[:32]
    placement.ended_at = now
    placement.save(update_fields=["state", "exit_code", "exit_signal", "output_url", "message", "failure", "ended_at"])
    _after_exit(job, placement, report)
    return "ok"


def _maybe_running(job: TrainingJob) -> None:
    placements = Placement.objects.filter(attempt__job=job, attempt__number=job.current_attempt)
    if job.status != JobStatus.CREATING or not all(p.state == PlacementState.RUNNING for p in placements):
        return
    now = timezone.now()
    attempt = JobAttempt.objects.get(job=job, number=job.current_attempt)
    attempt.running_at = now
    attempt.lost_seconds = _time_lost(job, attempt, now)
    attempt.save(update_fields=["running_at", "lost_seconds"])
    actions.transition(job.pk, JobStatus.RUNNING, "The command runs on every node", locked=job)


def _time_lost(job: TrainingJob, attempt: JobAttempt, now) -> float:
    """Work redone since the resumed checkpoint, plus the time without a running attempt."""
    if attempt.kind == AttemptKind.INITIAL:
        return 0.0
    previous = JobAttempt.objects.filter(job=job, number=attempt.number - 1).first()
    if previous is None:
        return 0.0
    progress_since = previous.running_at or previous.created_at
    if job.checkpoint_at and job.checkpoint_at > progress_since and attempt.resume_step is not None:
        progress_since = job.checkpoint_at
    return max(0.0, (now - progress_since).total_seconds())


def _after_exit(job: TrainingJob, placement: Placement, report: PlacementReport) -> None:
    placements = list(Placement.objects.filter(attempt__job=job, attempt__number=job.current_attempt))
    still_holding = [p for p in placements if p.state in HOLDING_STATES]
    schedule_on_commit()  # GPUs were freed
    if job.status == JobStatus.TERMINATING:
        if not still_holding:
            actions.remove_job(job)
        return
    if job.status not in (JobStatus.CREATING, JobStatus.RUNNING):
        return  # already decided (Failed, failover, paused); this is another node stopping
    if placement.exit_code == 0 and not placement.exit_signal and not placement.failure:
        if still_holding:
            return
        if all(p.exit_code == 0 for p in placements):
            outputs = sorted({p.output_url.rsplit("/", 2)[0] for p in placements if p.output_url})
            failover.end_attempt(job, "Completed")
            actions.complete_job(job.pk, "Every node's command exited with code 0", outputs[0] + "/" if outputs else "",
                                locked=job)
        return
    evidence = failover.evidence_for(placement)
    if report.image_error:
        evidence = dataclasses.replace(evidence, image_error=True, image_message=report.message)
    elif placement.message and not evidence.log_tail:
        evidence = dataclasses.replace(evidence, log_tail=(placement.message,))
    failover.interrupted(job, placement, evidence)


@transaction.atomic
def record_checkpoint(job_id: int, attempt: int, step: int, url: str, node_id: int, role: str) -> str:
    """A checkpoint commit from node `node_id`'s placement `role`; only the current attempt may
    move it (fencing), and only a node that runs it, under the job's checkpoint prefix."""
    target = agent_writes.placement_target(node_id, job_id, attempt, role)
    if target is None or not target.current:
        return "stale"
    return commit_checkpoint(job_id, attempt, step, url)


@transaction.atomic
def commit_checkpoint(job_id: int, attempt: int, step: int, url: str) -> str:
    """Move the job's newest durable checkpoint (the caller authorized the sender); only the
    current attempt may (fencing), and only under the job's checkpoint prefix."""
    agent_writes.check_checkpoint_url(job_id, url)
    job = TrainingJob.objects.select_for_update().filter(pk=job_id).first()
    if job is None or job.current_attempt != attempt:
        return "stale"
    actions.set_checkpoint(job.pk, step, url)  # an older step than the newest changes nothing
    return "ok"
