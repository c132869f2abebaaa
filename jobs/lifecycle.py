"""Actions on attempts: starting one on nodes, and what agents report about it.

Like jobs.actions, each function is atomic and locks the job row; it writes the job only
through jobs.actions (status, attempt, checkpoint, results).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from nodeagent.protocol import stream_role

from . import actions, console_log
from .channel import writes
from .channel.notify import schedule_on_commit, sync_nodes_on_commit
from .channel.placement_reports import (
    Applied,
    FollowUp,
    JobRow,
    PlacementReport,
    PlacementRow,
    Transition,
    Verdict,
    apply_reports,
)
from .choices import JobStatus
from .models import JobAttempt, Node, Placement, PlacementState, TrainingJob
from .models.attempts import HOLDING_STATES, AttemptKind
from .recovery import failover
from .scheduling.decision import Assignment, master_port
from .sql import bulk
from .storage import credentials

log = logging.getLogger(__name__)


KIND_BY_STATUS = {
    JobStatus.PENDING: AttemptKind.INITIAL,
    JobStatus.FAILOVER_IN_PROGRESS: AttemptKind.FAILOVER,
    JobStatus.SPOT_INTERRUPTED: AttemptKind.SPOT_RESUME,
}


# a new placement's other columns (bulk.insert_each names every column without a database default)
PLACEMENT_DEFAULTS = {"state": PlacementState.ASSIGNED, "message": "", "failure": "", "output_url": "", "warm_released_for": ""}


@transaction.atomic
def start_attempts(placed: Mapping[int, Sequence[Assignment]]) -> dict[int, JobAttempt]:
    """Create the next attempt of each waiting job on its nodes and move it to Creating, in a
    constant number of statements however many jobs a scheduler run places.

    A failed-over or interrupted job resumes from its newest committed checkpoint
    (CKPT_LAST_STEP), and each of its streams gets a marker line that says why and where.
    Returns job id → its new attempt (a job deleted or moved on meanwhile is left out).
    """
    jobs = list(TrainingJob.objects.select_for_update().filter(pk__in=list(placed), status__in=list(KIND_BY_STATUS)))
    # each attempt's own object-storage keys, minted now (in this transaction: a rollback leaves
    # identities the credential sweep removes); a job whose keys could not be made waits
    minted = credentials.mint(jobs)
    if minted.failed:
        actions.set_waiting_reasons({job: minted.failed[job.pk] for job in jobs if job.pk in minted.failed})
        jobs = [job for job in jobs if job.pk not in minted.failed]
        placed = {job.pk: placed[job.pk] for job in jobs}
    if not jobs:
        return {}
    resumed = [job for job in jobs if KIND_BY_STATUS[job.status] != AttemptKind.INITIAL]
    causes = dict(
        JobAttempt.objects.filter(job__in=resumed, number=F("job__current_attempt")).values_list("job_id", "cause")
    ) if resumed else {}
    addresses = dict(Node.objects.filter(pk__in={placed[job.pk][0].node_id for job in jobs}).values_list("pk", "address"))
    fallen_back = _first_on_demand(jobs)
    attempts = JobAttempt.objects.bulk_create([
        JobAttempt(
            job=job, number=job.current_attempt + 1,
            kind=AttemptKind.ON_DEMAND_FALLBACK if job.pk in fallen_back else KIND_BY_STATUS[job.status],
            on_demand=job.on_demand_since is not None,
            master_addr=addresses[placed[job.pk][0].node_id], master_port=master_port(job.pk, job.current_attempt + 1),
            # a first attempt has a checkpoint only when the job was created from another job's
            # (jobs.storage.checkpoint_copy): it starts from it, as a failover would
            resume_step=job.checkpoint_step,
            resume_checkpoint_at=job.checkpoint_at if KIND_BY_STATUS[job.status] != AttemptKind.INITIAL else None,
            **credentials.attempt_fields(minted, job.pk),
        )
        for job in jobs
    ])
    rows = [(attempt.pk, rank, a) for attempt in attempts for rank, a in enumerate(placed[attempt.job_id])]
    bulk.insert_each(Placement, {
        "attempt_id": ("bigint", [pk for pk, _, _ in rows]), "node_id": ("bigint", [a.node_id for _, _, a in rows]),
        "node_name": ("text", [a.node_name for _, _, a in rows]), "node_rank": ("integer", [rank for _, rank, _ in rows]),
        "role": ("text", [stream_role(rank) for _, rank, _ in rows]),
        "gpu_indices": ("jsonb", [list(a.gpu_indices) for _, _, a in rows]),
    }, same=PLACEMENT_DEFAULTS)
    reasons = {
        job.pk: _placed_reason(job, attempt, placed[job.pk], causes.get(job.pk, ""))
        for job, attempt in zip(jobs, attempts, strict=True)
    }
    actions.start_attempts(jobs, {attempt.job_id: attempt.number for attempt in attempts}, reasons)
    sync_nodes_on_commit(a.node_id for assignments in placed.values() for a in assignments)
    return {attempt.job_id: attempt for attempt in attempts}


def _first_on_demand(jobs: Sequence[TrainingJob]) -> set[int]:
    """Spot jobs that fell back to on-demand capacity and are placed there for the first time."""
    fell = [job for job in jobs if job.on_demand_since is not None]
    if not fell:
        return set()
    placed_before = set(JobAttempt.objects.filter(job__in=fell, on_demand=True).values_list("job_id", flat=True))
    return {job.pk for job in fell} - placed_before


def _placed_reason(job: TrainingJob, attempt: JobAttempt, assignments: Sequence[Assignment], cause: str) -> str:
    nodes = ", ".join(a.node_name for a in assignments)
    if attempt.kind == AttemptKind.INITIAL:
        start = f", to start from checkpoint step {attempt.resume_step}" if attempt.resume_step is not None else ""
        return f"Attempt {attempt.number} placed on {nodes}; preparing the environment{start}"
    resume = f"checkpoint step {attempt.resume_step}" if attempt.resume_step is not None else "the start (no checkpoint was committed)"
    label = {AttemptKind.FAILOVER: "Failover", AttemptKind.ON_DEMAND_FALLBACK: "On-demand fallback"}.get(
        attempt.kind, "Spot resume")
    for rank, a in enumerate(assignments):
        console_log.write(job.pk, stream_role(rank), attempt.number,
                          f"[{label.upper()}] ==== attempt {attempt.number - 1} was interrupted ({cause}); "
                          f"attempt {attempt.number} on node {a.node_name}, resuming from {resume} ====", opening=True)
    return f"{label}: attempt {attempt.number} placed on {nodes}, resuming from {resume}"


def start_attempt(job_id: int, assignments: Sequence[Assignment]) -> JobAttempt | None:
    """One job's next attempt (see start_attempts)."""
    return start_attempts({job_id: assignments}).get(job_id)


def record_placement(report: PlacementReport, node_id: int | None) -> str:
    """Apply one agent's report; returns "stale" when the attempt is no longer current (fenced)
    or the placement ended. Raises writes.RefusedWrite for a placement not this node's."""
    verdict = record_placements([(node_id, report)])[0]
    if verdict.kind == "refused":
        raise writes.RefusedWrite(verdict.reason)
    return verdict.kind


@transaction.atomic
def record_placements(items: Sequence[tuple[int | None, PlacementReport]], with_jobs: Iterable[int] = ()) -> list[Verdict]:
    """Apply agents' reports ((sending node, report); each node's in the order it sent them), one
    verdict each, in a constant number of statements however many jobs they touch: a fleet's
    reports arrive hundreds at a time, and one transaction each was what held it back.

    The jobs are locked in id order, with `with_jobs` (those the caller's transaction writes
    rows of next, e.g. log lines: a row that references a job takes a lock on it, and two
    batches that took theirs in another order deadlocked), then their current attempts'
    placements. jobs.channel.placement_reports decides; a decision that needs more than these rows (a
    failure's failover, a deleted job's removal) runs through its own action before that job's
    later reports are applied.
    """
    by_job: dict[int, list[int]] = {}
    for index, (_, report) in enumerate(items):
        by_job.setdefault(report.job_id, []).append(index)
    # only what the rules and the bulk writes read: a batch locks hundreds of jobs (a follow-up
    # reads its job whole, _follow_up)
    locked = TrainingJob.objects.select_for_update().filter(pk__any={*by_job, *with_jobs}).order_by("pk").only(
        "pk", "owner_id", "status", "status_reason", "result_url", "current_attempt",
    )
    jobs = {job.pk: job for job in locked if job.pk in by_job}
    rows = _placements_of(list(jobs))
    verdicts: list[tuple[int, Verdict]] = []
    writes = _ReportWrites(timezone.now())
    for job_id, indexes in sorted(by_job.items()):
        job = jobs.get(job_id)
        while indexes:
            placements = rows.get(job_id, {})
            applied = apply_reports(
                JobRow(job.pk, job.status, job.current_attempt) if job is not None else None,
                [row for row, _ in placements.values()], [items[i] for i in indexes], writes.now,
            )
            verdicts += zip(indexes, applied.verdicts, strict=False)
            indexes = indexes[len(applied.verdicts):]
            if job is None:
                continue
            writes.add(job, applied, placements)
            if applied.follow_up is not None:
                writes.flush()  # the follow-up reads what the reports so far wrote
                job = _follow_up(job.pk, applied.follow_up)
                rows.update(_placements_of([job_id]) if job is not None else {job_id: {}})
    writes.flush()
    return [verdict for _, verdict in sorted(verdicts, key=lambda pair: pair[0])]


@dataclass(frozen=True)
class _Attempt:
    """What the writes read of a placement's attempt."""

    pk: int
    job_id: int
    number: int
    kind: str
    resume_step: int | None


def _placements_of(job_ids: list[int]) -> dict[int, dict[int, tuple[PlacementRow, _Attempt]]]:
    """Job id → its current attempt's placements (locked): pk → (row, its attempt)."""
    found: dict[int, dict[int, tuple[PlacementRow, _Attempt]]] = {}
    if not job_ids:
        return found
    placements = (
        Placement.objects.select_for_update(of=("self",))
        .filter(attempt__job_id__any=job_ids, attempt__number=F("attempt__job__current_attempt")).order_by("pk")
        .values_list("pk", "node_id", "role", "state", "exit_code", "exit_signal", "failure", "output_url", "message",
                     "started_at", "ended_at", "attempt_id", "attempt__job_id", "attempt__number", "attempt__kind",
                     "attempt__resume_step")
    )
    for pk, node_id, role, state, code, signal, failure, output, message, started, ended, *attempt in placements:
        row = PlacementRow(pk=pk, node_id=node_id, role=role, state=state, exit_code=code, exit_signal=signal,
                           failure=failure, output_url=output, message=message, started_at=started, ended_at=ended)
        found.setdefault(attempt[1], {})[pk] = (row, _Attempt(*attempt))
    return found


class _ReportWrites:
    """What applied reports change, written for many jobs at once: each table in one statement."""

    PLACEMENT_COLUMNS = {
        "state": "text", "started_at": "timestamptz", "exit_code": "integer", "exit_signal": "integer",
        "output_url": "text", "message": "text", "failure": "text", "ended_at": "timestamptz",
    }

    def __init__(self, now: datetime) -> None:
        self.now = now
        self._clear()

    def _clear(self) -> None:
        self.placements: dict[int, PlacementRow] = {}
        self.transitions: dict[int, tuple[TrainingJob, list[Transition]]] = {}
        self.running: list[_Attempt] = []
        self.ended: list[int] = []  # attempts that ended Completed
        self.freed = False

    def add(self, job: TrainingJob, applied: Applied, placements: Mapping[int, tuple[PlacementRow, _Attempt]]) -> None:
        for pk in applied.changed:
            self.placements[pk] = placements[pk][0]
        attempt = next(iter(placements.values()))[1] if placements else None
        if applied.transitions:
            self.transitions.setdefault(job.pk, (job, []))[1].extend(applied.transitions)
        if applied.running and attempt is not None:
            self.running.append(attempt)
        if applied.ended and attempt is not None:
            self.ended.append(attempt.pk)
        self.freed = self.freed or applied.freed

    def flush(self) -> None:
        if self.placements:
            rows = list(self.placements.values())
            bulk.update_each(Placement, [row.pk for row in rows], {
                column: (kind, [getattr(row, column) for row in rows]) for column, kind in self.PLACEMENT_COLUMNS.items()
            })
            if any(row.state not in HOLDING_STATES for row in rows):
                credentials.request_sweep_on_commit()  # an attempt may hold nothing now: its keys go
        if self.running:
            bulk.update_each(
                JobAttempt, [attempt.pk for attempt in self.running],
                {"lost_seconds": ("double precision", [_time_lost(attempt, self.now) for attempt in self.running])},
                same={"running_at": self.now},
            )
        if self.ended:
            # the job's move to Completed (apply_transitions, next) would stamp the stop request in
            # an UPDATE of its own: one more row version per completed job in a fleet's exit wave
            JobAttempt.objects.filter(pk__any=self.ended, ended_at__isnull=True).update(
                ended_at=self.now, cause="Completed", stop_requested_at=Coalesce("stop_requested_at", Value(self.now)),
            )
        if self.transitions:
            actions.apply_transitions(dict(self.transitions.values()))
        if self.freed:
            schedule_on_commit()  # GPUs were freed
        self._clear()


def _follow_up(job_id: int, follow_up: FollowUp) -> TrainingJob | None:
    """Run a decision the report rows alone could not make (the job's row is locked); the job as
    it is now (None: gone)."""
    job = TrainingJob.objects.get(pk=job_id)
    if follow_up.kind == "remove":
        actions.remove_job(job)
        return None
    placement = Placement.objects.select_related("attempt").get(pk=follow_up.placement.pk)
    report = follow_up.report
    evidence = failover.evidence_for(placement)
    if report.image_error:
        evidence = dataclasses.replace(evidence, image_error=True, image_message=report.message)
    elif placement.message and not evidence.log_tail:
        evidence = dataclasses.replace(evidence, log_tail=(placement.message,))
    failover.interrupted(job, placement, evidence)
    return TrainingJob.objects.filter(pk=job_id).only(
        "pk", "owner_id", "status", "status_reason", "result_url", "current_attempt",
    ).first()


def _time_lost(attempt: _Attempt, now: datetime) -> float:
    """Work redone since the resumed checkpoint, plus the time without a running attempt."""
    if attempt.kind == AttemptKind.INITIAL:
        return 0.0
    previous = JobAttempt.objects.filter(job_id=attempt.job_id, number=attempt.number - 1).select_related("job").first()
    if previous is None:
        return 0.0
    job = previous.job
    progress_since = previous.running_at or previous.created_at
    if job.checkpoint_at and job.checkpoint_at > progress_since and attempt.resume_step is not None:
        progress_since = job.checkpoint_at
    return max(0.0, (now - progress_since).total_seconds())


@transaction.atomic
def record_checkpoint(job_id: int, attempt: int, step: int, url: str, node_id: int, role: str) -> str:
    """A checkpoint commit from node `node_id`'s placement `role`; only the current attempt may
    move it (fencing), and only a node that runs it, under the job's checkpoint prefix."""
    target = writes.placement_target(node_id, job_id, attempt, role)
    if target is None or not target.current:
        return "stale"
    return commit_checkpoint(job_id, attempt, step, url)


@transaction.atomic
def commit_checkpoint(job_id: int, attempt: int, step: int, url: str) -> str:
    """Move the job's newest durable checkpoint (the caller authorized the sender); only the
    current attempt may (fencing), and only under the job's checkpoint prefix."""
    job = TrainingJob.objects.select_for_update().filter(pk=job_id).first()
    if job is None:
        return "stale"
    writes.check_checkpoint_url(job.owner_id, job_id, url)
    if job.current_attempt != attempt:
        return "stale"
    actions.set_checkpoint(job.pk, step, url)  # an older step than the newest changes nothing
    return "ok"
