"""Partial recovery: a resumed gang keeps its healthy nodes, at their ranks.

When one node of a multi-node job fails, the job's next attempt is placed on the nodes of the
interrupted attempt that are still healthy (jobs.scheduling.decision's `warm_nodes`: they come first),
each at the rank it had, and only the failed node's rank goes to another node. The healthy
nodes' agents then find that attempt's prepared working directory and local checkpoint copy
on their disk and reuse them (nodeagent.reuse) instead of downloading and preparing again.

A new attempt is still a new attempt (its own number, rendezvous port and storage keys), so
the fencing of a stale placement by attempt number stays as it was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from django.conf import settings
from django.db.models import F

from ..models import Placement, PlacementState, TrainingJob
from .decision import Assignment, JobRequest

# node id → the rank it had in the interrupted attempt
Gang = dict[int, int]


def healthy_gangs(jobs: Iterable[TrainingJob]) -> dict[int, Gang]:
    """Job id → the nodes of its newest attempt that did not fail (their ranks), for the jobs
    that resume (one query for all). A node is left out when its placement was lost or it is
    the node the attempt's fault was on; a cordoned or offline node is left out by the
    scheduler itself (it is not eligible)."""
    resuming = [job.pk for job in jobs if job.current_attempt]
    if not resuming or not settings.PARTIAL_RECOVERY:
        return {}
    rows = (
        Placement.objects.filter(attempt__job_id__in=resuming, attempt__number=F("attempt__job__current_attempt"),
                                 node__isnull=False)
        .exclude(state=PlacementState.LOST)
        .values_list("attempt__job_id", "node_id", "node_rank", "node_name", "attempt__fault_node")
    )
    gangs: dict[int, Gang] = {}
    for job_id, node_id, rank, name, fault_node in rows:
        if name != fault_node:
            gangs.setdefault(job_id, {})[node_id] = rank
    return gangs


def prefer(request: JobRequest, gang: Gang | None) -> JobRequest:
    """The request, with its healthy nodes first (a failover never needs more nodes than before)."""
    if not gang:
        return request
    return dataclasses.replace(request, warm_nodes=request.warm_nodes | frozenset(gang))


def keep_ranks(assignments: Sequence[Assignment], gang: Gang | None) -> list[Assignment]:
    """The assignments in rank order, each healthy node at the rank it had; the new nodes take
    the ranks that are left, in the order the scheduler chose them (rank 0 is the master)."""
    if not gang:
        return list(assignments)
    ranks: list[Assignment | None] = [None] * len(assignments)
    newcomers = []
    for assignment in assignments:
        rank = gang.get(assignment.node_id)
        if rank is not None and rank < len(ranks) and ranks[rank] is None:
            ranks[rank] = assignment
        else:
            newcomers.append(assignment)
    for index, slot in enumerate(ranks):
        if slot is None:
            ranks[index] = newcomers.pop(0)
    return [a for a in ranks if a is not None]


def keep_all_ranks(placed: Mapping[int, Sequence[Assignment]], gangs: Mapping[int, Gang]) -> dict[int, list[Assignment]]:
    return {job_id: keep_ranks(assignments, gangs.get(job_id)) for job_id, assignments in placed.items()}
