"""Celery tasks of the jobs app: thin wrappers that load plain data and call the actions."""

from __future__ import annotations

import logging
from collections import defaultdict

from celery import shared_task
from django.db import connection, transaction

from workspaces import scheduler as workspace_scheduling  # reserved nodes, warm pool, quotas

from . import failover, lifecycle, nodes
from .choices import JobStatus, LearningType
from .models import JobAttempt, Node, NodeGPU, Placement, TrainingJob
from .models.attempts import HOLDING_STATES
from .scheduling import JobRequest, NodeSlot, SpotHolding, plan_preemption, schedule
from .slurm import backend as slurm_backend  # jobs of Slurm-served server types go to their cluster

log = logging.getLogger(__name__)

# any 64-bit number unique to this lock; two scheduler runs at once would double-book GPUs
SCHEDULER_LOCK_ID = 0x5A1_7A1A


def _take_scheduler_lock() -> None:
    """Serialise scheduler runs with a transaction-scoped lock (SQLite serialises writers itself).

    Runs wait rather than skip: a skipped run could miss the change that triggered it.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SCHEDULER_LOCK_ID])


def capacity() -> list[NodeSlot]:
    """Schedulable nodes with the indices of their free, healthy GPUs."""
    usable = list(Node.objects.filter(connected=True, lost=False, cordoned=False).select_related("server_type"))
    healthy = defaultdict(set)
    for node_id, index in NodeGPU.objects.filter(node__in=usable, healthy=True).values_list("node_id", "index"):
        healthy[node_id].add(index)
    for node_id, indices in Placement.objects.filter(node__in=usable, state__in=HOLDING_STATES).values_list("node_id", "gpu_indices"):
        healthy[node_id] -= set(indices)
    return [NodeSlot(n.pk, n.name, n.server_type.name, tuple(sorted(healthy[n.pk]))) for n in usable]


def _eligible(jobs: list[TrainingJob]) -> list[TrainingJob]:
    """Waiting jobs the scheduler may place now, in priority order.

    A failed-over or interrupted job waits until every placement of its previous attempt has
    stopped (its last checkpoint commit is in, its GPUs are free) and, for a failover, until
    the assessment decided to reallocate (the attempt has ended). Failovers come first, then
    on-demand jobs, then spot jobs; FIFO within each.
    """
    holding = set(
        Placement.objects.filter(attempt__job__in=jobs, state__in=HOLDING_STATES)
        .values_list("attempt__job_id", "attempt__number")
    )
    ended = set(
        JobAttempt.objects.filter(job__in=jobs, ended_at__isnull=False).values_list("job_id", "number")
    )
    ready = []
    for job in jobs:
        if (job.pk, job.current_attempt) in holding:
            continue
        if job.status == JobStatus.FAILOVER_IN_PROGRESS and (job.pk, job.current_attempt) not in ended:
            continue
        ready.append(job)
    rank = {JobStatus.FAILOVER_IN_PROGRESS: 0}
    return sorted(ready, key=lambda j: (rank.get(j.status, 1), j.learning_type == LearningType.SPOT, j.created_at, j.pk))


def _request_for(job: TrainingJob) -> JobRequest:
    return JobRequest(job.pk, job.server_type.name, job.gpus_per_node, job.node_count)


def _spot_holdings() -> list[SpotHolding]:
    holdings: dict[int, SpotHolding] = {}
    rows = Placement.objects.filter(
        state__in=HOLDING_STATES, attempt__job__learning_type=LearningType.SPOT,
        attempt__job__status__in=[JobStatus.CREATING, JobStatus.RUNNING],
    ).values_list("attempt__job_id", "attempt__created_at", "node_id", "gpu_indices")
    for job_id, created, node_id, gpus in rows:
        holding = holdings.setdefault(job_id, SpotHolding(job_id, created.timestamp(), {}))
        holding.gpus[node_id] = tuple(gpus)
    return list(holdings.values())


def _reclaim_for(waiting: list[TrainingJob], decision, slots: list[NodeSlot], shape=lambda request: request) -> int:
    """Interrupt spot jobs for the first on-demand job that waits for capacity they hold."""
    spot = _spot_holdings()
    if not spot:
        return 0
    left = [NodeSlot(s.node_id, s.name, s.server_type, decision.remaining.get(s.node_id, ())) for s in slots]
    for job in waiting:
        if job.learning_type == LearningType.SPOT or job.pk in decision.placed:
            continue
        victims = plan_preemption(shape(_request_for(job)), left, spot)
        if victims:
            for victim in TrainingJob.objects.select_for_update().filter(pk__in=victims):
                if victim.status in (JobStatus.CREATING, JobStatus.RUNNING):
                    failover.pause_spot(victim, f"capacity reclaimed by on-demand job {job.name}")
            lifecycle.set_waiting_reason(job.pk, f"Waiting for {len(victims)} spot job(s) to release their GPUs")
            return len(victims)
    return 0


@shared_task(acks_late=True, ignore_result=True)
def schedule_jobs() -> dict:
    """Place waiting jobs on free nodes (gang, priority then FIFO, with backfill); idempotent."""
    with transaction.atomic():
        _take_scheduler_lock()
        waiting_jobs = TrainingJob.objects.filter(status__in=[JobStatus.PENDING, JobStatus.FAILOVER_IN_PROGRESS, JobStatus.SPOT_INTERRUPTED])
        slurm_backend.submit_on_commit(waiting_jobs)
        candidates = list(slurm_backend.served_by_agents(waiting_jobs).select_related("server_type"))
        waiting = _eligible(candidates)
        if not waiting:
            return {"placed": 0, "waiting": 0}
        slots = capacity()
        plan = workspace_scheduling.prepare(waiting)
        decision = schedule([plan.shape(_request_for(job)) for job in waiting if job.pk not in plan.held], slots)
        decision.waiting.update(plan.held)
        for job_id, assignments in decision.placed.items():
            lifecycle.start_attempt(job_id, assignments)
            plan.placed(job_id, assignments)
        for job_id, reason in decision.waiting.items():
            lifecycle.set_waiting_reason(job_id, reason[:1].upper() + reason[1:])
        preempted = _reclaim_for([job for job in waiting if job.pk not in plan.held], decision, slots, plan.shape)
    return {"placed": len(decision.placed), "waiting": len(decision.waiting), "preempted": preempted}


@shared_task(acks_late=True, ignore_result=True)
def recheck_interruption(job_id: int, placement_id: int) -> None:
    """A kill without evidence, looked at again a few seconds later (jobs.failover)."""
    with transaction.atomic():
        job = TrainingJob.objects.select_for_update().filter(pk=job_id).first()
        placement = Placement.objects.select_related("attempt").filter(pk=placement_id).first()
        if job is None or placement is None:
            return
        failover.recheck_later(job, placement)


@shared_task(acks_late=True, ignore_result=True)
def watch_heartbeats() -> list[str]:
    lost = nodes.watch_heartbeats()
    if lost:
        log.warning("nodes lost (no heartbeat): %s", ", ".join(lost))
    return lost
