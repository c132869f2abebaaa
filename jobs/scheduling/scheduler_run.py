"""One run of the scheduler: read the ledger, decide (jobs.scheduling.placement), apply the decision.

Everything happens in one transaction under the scheduler lock, so two runs (two Celery
workers) never decide on the same GPUs. Level-triggered: a run looks at everything waiting,
so running it again changes nothing, and a lost trigger is made up by the next tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from .. import actions, events, lifecycle
from ..choices import JobStatus
from ..models import JobAttempt, Placement, TrainingJob
from ..models.attempts import HOLDING_STATES, PlacementState
from ..models.jobs import AWAITING_CHECKPOINT_COPY
from ..recovery import failover
from ..sql import bulk
from ..storage import credentials
from . import policy, regang
from .capacity import Ledger
from .capacity_load import load_ledger, stop_grace
from .decision import Assignment, Decision, JobRequest
from .locks import take_scheduler_lock
from .placement import schedule

log = logging.getLogger(__name__)

WAITING = (JobStatus.PENDING, JobStatus.FAILOVER_IN_PROGRESS, JobStatus.SPOT_INTERRUPTED)


@dataclass(frozen=True)
class RunSummary:
    placed: int = 0
    waiting: int = 0
    preempted: int = 0
    released: int = 0  # placements that stopped holding GPUs when their stop grace ended
    decision: Decision | None = field(default=None, repr=False)  # what jobs.scheduling.placement decided

    def counts(self) -> dict[str, int]:
        return {"placed": self.placed, "waiting": self.waiting, "preempted": self.preempted, "released": self.released}


def release_overdue(now: datetime) -> int:
    """Placements of stopped jobs whose grace is over hold nothing: mark them so, and finish the
    deletion of Terminating jobs that nothing holds any more."""
    overdue = Placement.objects.filter(
        # placements on no node of ours run on a Slurm cluster, which says when they end
        state__in=HOLDING_STATES, node__isnull=False, attempt__stop_requested_at__lt=now - stop_grace(),
    )
    job_ids = set(overdue.values_list("attempt__job_id", flat=True))
    released = overdue.update(
        state=PlacementState.RELEASED, ended_at=now,
        message="released: the agent did not confirm the stop within the stop grace",
    )
    if released:
        credentials.request_sweep_on_commit()
    for job in TrainingJob.objects.select_for_update().filter(pk__in=job_ids, status=JobStatus.TERMINATING):
        if not Placement.objects.filter(attempt__job=job, state__in=HOLDING_STATES).exists():
            actions.remove_job(job)
    return released


def _request(job: TrainingJob) -> JobRequest:
    return JobRequest(
        job_id=job.pk, owner_id=job.owner_id, server_type=job.server_type.name,
        gpus_per_node=job.gpus_per_node, node_count=job.node_count,
        spot=job.runs_as_spot, workspace_id=job.workspace_id,
    )


def _ready(jobs: list[TrainingJob], ledger: Ledger) -> list[TrainingJob]:
    """Waiting jobs that may be placed now, in priority order.

    A failed-over or interrupted job waits until every placement of its previous attempt has
    stopped (its last checkpoint commit is in, its GPUs are free) and, for a failover, until
    the assessment decided to reallocate. Failovers come first, then on-demand jobs, then spot
    jobs; FIFO within each.
    """
    still_held = {job.pk for job in jobs if job.current_attempt and ledger.job_gpus(job.pk)}
    assessing = set(
        JobAttempt.objects.filter(
            job__in=[j for j in jobs if j.status == JobStatus.FAILOVER_IN_PROGRESS], ended_at__isnull=True,
        ).values_list("job_id", flat=True)
    )
    # their reason (why the attempt was interrupted, what the assessment looks at) stays meanwhile
    ready = [job for job in jobs if job.pk not in still_held and job.pk not in assessing]
    rank = {JobStatus.FAILOVER_IN_PROGRESS: 0}
    ready.sort(key=lambda j: (rank.get(j.status, 1), j.runs_as_spot, j.created_at, j.pk))
    return ready


def _release_warm(jobs: dict[int, TrainingJob], started: Mapping[int, Sequence[Assignment]], now: datetime) -> None:
    """The warm holds the new placements took end now, and say for what (one UPDATE)."""
    released: dict[int, str] = {}
    for job_id, assignments in started.items():
        job = jobs[job_id]
        for assignment in assignments:
            for hold in assignment.takes_warm:
                taker = f"your job {job.name}" if hold.owner_id == job.owner_id else "another user's job"
                released[hold.placement_id] = f"{taker} on {assignment.node_name}"[:200]
    bulk.update_each(
        Placement, list(released), {"warm_released_for": ("text", list(released.values()))},
        same={"warm_released_at": now}, where="t.warm_released_at IS NULL",
    )


def run(now: datetime | None = None, on_locked: Callable[[], None] | None = None) -> RunSummary:
    """Place waiting jobs on free capacity (gang, priority then FIFO, with backfill); idempotent.
    `on_locked` is called once this run holds the scheduler lock, before it reads anything."""
    with events.batched():  # the run's job events (sent on commit) go out together
        return _run(now, on_locked)


def _run(now: datetime | None, on_locked: Callable[[], None] | None = None) -> RunSummary:
    with transaction.atomic():
        take_scheduler_lock()
        if on_locked is not None:
            on_locked()
        now = now or timezone.now()
        released = release_overdue(now)
        queue = policy.served_by_agents(TrainingJob.objects.filter(status__in=WAITING).exclude(AWAITING_CHECKPOINT_COPY))
        waiting = list(queue.select_related("server_type"))
        if not waiting and not released:
            return RunSummary()
        failover.fall_back_due(waiting, now)  # spot jobs whose fallback budget ran out: on-demand from now on
        cluster = policy.current()
        ledger = load_ledger(now, cluster.reservations())
        if cluster.reconcile(ledger):
            ledger = load_ledger(now, cluster.reservations())
        ready = _ready(waiting, ledger)
        policies = cluster.begin(ready, ledger)
        # a resumed gang keeps its healthy nodes, at their ranks (partial recovery)
        gangs = regang.healthy_gangs(ready)
        decision = schedule(
            (policies.shape(regang.prefer(_request(job), gangs.get(job.pk))) for job in ready if job.pk not in policies.held),
            ledger, policies,
        )
        decision.placed = regang.keep_all_ranks(decision.placed, gangs)
        by_id = {job.pk: job for job in ready}
        attempts = lifecycle.start_attempts(decision.placed)
        started = {job_id: decision.placed[job_id] for job_id in attempts}
        _release_warm(by_id, started, now)
        policies.placed({by_id[job_id]: assignments for job_id, assignments in started.items()})
        for victim in TrainingJob.objects.select_for_update().filter(pk__in=list(decision.preempt)):
            if victim.status in (JobStatus.CREATING, JobStatus.RUNNING):
                failover.pause_spot(victim, f"capacity reclaimed by on-demand job {by_id[decision.preempt[victim.pk]].name}")
        reasons = {**decision.waiting, **policies.held}
        actions.set_waiting_reasons({job: reasons[job.pk] for job in waiting if job.pk in reasons})
    return RunSummary(len(decision.placed), len(decision.waiting) + len(policies.held), len(decision.preempt), released, decision)
