"""Celery tasks of the jobs app: thin wrappers that load plain data and call the actions."""

from __future__ import annotations

import logging
from collections import defaultdict

from celery import shared_task
from django.db import connection, transaction

from . import lifecycle, nodes
from .choices import JobStatus
from .models import Node, NodeGPU, Placement, TrainingJob
from .models.attempts import HOLDING_STATES
from .scheduling import JobRequest, NodeSlot, schedule

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


@shared_task(acks_late=True, ignore_result=True)
def schedule_jobs() -> dict:
    """Place waiting jobs on free nodes (gang, FIFO with backfill); idempotent."""
    with transaction.atomic():
        _take_scheduler_lock()
        waiting = list(
            TrainingJob.objects.filter(status=JobStatus.PENDING)
            .select_related("server_type").order_by("created_at", "id")
        )
        if not waiting:
            return {"placed": 0, "waiting": 0}
        requests = [
            JobRequest(job.pk, job.server_type.name, job.gpus_per_node, job.node_count) for job in waiting
        ]
        decision = schedule(requests, capacity())
        for job_id, assignments in decision.placed.items():
            lifecycle.start_attempt(job_id, assignments)
        for job_id, reason in decision.waiting.items():
            lifecycle.set_waiting_reason(job_id, reason[:1].upper() + reason[1:])
    return {"placed": len(decision.placed), "waiting": len(decision.waiting)}


@shared_task(acks_late=True, ignore_result=True)
def watch_heartbeats() -> list[str]:
    lost = nodes.watch_heartbeats()
    if lost:
        log.warning("nodes lost (no heartbeat): %s", ", ".join(lost))
    return lost
