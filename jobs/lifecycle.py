"""Actions on attempts: starting one on nodes, and what agents report about it.

Like jobs.actions, each function is atomic, locks the job row, and changes status only
through `actions.transition`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from . import actions
from .choices import JobStatus
from .models import JobAttempt, Node, Placement, PlacementState, TrainingJob
from .models.attempts import HOLDING_STATES
from .notify import schedule_on_commit, sync_nodes_on_commit
from .scheduling import Assignment, master_port

log = logging.getLogger(__name__)


@transaction.atomic
def start_attempt(job_id: int, assignments: list[Assignment]) -> JobAttempt | None:
    """Create the next attempt of a waiting job on these nodes and move it to Creating."""
    job = TrainingJob.objects.select_for_update().filter(pk=job_id).first()
    if job is None or job.status != JobStatus.PENDING:
        return None  # deleted or moved on since the scheduler looked
    number = job.current_attempt + 1
    master = Node.objects.get(pk=assignments[0].node_id)
    attempt = JobAttempt.objects.create(
        job=job, number=number, master_addr=master.address, master_port=master_port(job.pk, number),
    )
    Placement.objects.bulk_create([
        Placement(
            attempt=attempt, node_id=a.node_id, node_name=a.node_name, node_rank=rank,
            role="master" if rank == 0 else f"worker-{rank}", gpu_indices=list(a.gpu_indices),
        )
        for rank, a in enumerate(assignments)
    ])
    job.current_attempt = number
    job.save(update_fields=["current_attempt", "updated_at"])
    nodes = ", ".join(a.node_name for a in assignments)
    actions.transition(job.pk, JobStatus.CREATING, f"Attempt {number} placed on {nodes}; preparing the environment")
    sync_nodes_on_commit(a.node_id for a in assignments)
    return attempt


def set_waiting_reason(job_id: int, reason: str) -> None:
    """A waiting job's reason changes without a status change (no history row)."""
    TrainingJob.objects.filter(pk=job_id, status=JobStatus.PENDING).exclude(status_reason=reason).update(
        status_reason=reason, updated_at=timezone.now(),
    )


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


@transaction.atomic
def record_placement(report: PlacementReport, node_id: int) -> str:
    """Apply an agent's report; returns "stale" when the attempt is no longer current (fenced)."""
    job = TrainingJob.objects.select_for_update().filter(pk=report.job_id).first()
    if job is None or job.current_attempt != report.attempt:
        return "stale"
    placement = (
        Placement.objects.select_for_update()
        .filter(attempt__job=job, attempt__number=report.attempt, role=report.role, node_id=node_id)
        .first()
    )
    if placement is None or placement.state in (PlacementState.EXITED, PlacementState.LOST):
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
    placement.ended_at = now
    placement.save(update_fields=["state", "exit_code", "exit_signal", "output_url", "message", "ended_at"])
    _after_exit(job, placement, report)
    return "ok"


def _maybe_running(job: TrainingJob) -> None:
    placements = Placement.objects.filter(attempt__job=job, attempt__number=job.current_attempt)
    if job.status == JobStatus.CREATING and all(p.state == PlacementState.RUNNING for p in placements):
        JobAttempt.objects.filter(job=job, number=job.current_attempt).update(running_at=timezone.now())
        actions.transition(job.pk, JobStatus.RUNNING, "The command runs on every node")


def _describe_exit(placement: Placement) -> str:
    where = f"{placement.role} on {placement.node_name}"
    if placement.exit_signal:
        return f"{where} was killed by signal {placement.exit_signal}"
    if placement.exit_code is None:
        return f"{where} ended without an exit code"
    return f"{where} exited with code {placement.exit_code}"


def _end_attempt(job: TrainingJob, cause: str) -> None:
    JobAttempt.objects.filter(job=job, number=job.current_attempt, ended_at__isnull=True).update(
        ended_at=timezone.now(), cause=cause[:500],
    )


def _after_exit(job: TrainingJob, placement: Placement, report: PlacementReport) -> None:
    placements = list(Placement.objects.filter(attempt__job=job, attempt__number=job.current_attempt))
    still_holding = [p for p in placements if p.state in HOLDING_STATES]
    node_ids = [p.node_id for p in placements]
    schedule_on_commit()  # GPUs were freed
    if job.status == JobStatus.TERMINATING:
        if not still_holding:
            actions.remove_job(job)
        return
    if job.status not in (JobStatus.CREATING, JobStatus.RUNNING):
        return  # already decided (e.g. Failed); this is one of the other nodes stopping
    if report.image_error:
        _end_attempt(job, report.message)
        actions.transition(job.pk, JobStatus.IMAGE_PULL_BACKOFF, report.message or "The image could not be pulled")
        sync_nodes_on_commit(node_ids)
        return
    if placement.exit_code == 0 and not placement.exit_signal:
        if still_holding:
            return
        if all(p.exit_code == 0 for p in placements):
            outputs = sorted({p.output_url.rsplit("/", 2)[0] for p in placements if p.output_url})
            job.result_url = outputs[0] + "/" if outputs else ""
            job.save(update_fields=["result_url", "updated_at"])
            _end_attempt(job, "Completed")
            actions.transition(job.pk, JobStatus.COMPLETED, "Every node's command exited with code 0")
        return
    cause = _describe_exit(placement)
    if placement.message:
        cause += f": {placement.message}"
    _end_attempt(job, cause)
    actions.transition(job.pk, JobStatus.FAILED, cause + ("; the other nodes were stopped" if len(placements) > 1 else ""))
    sync_nodes_on_commit(node_ids)
