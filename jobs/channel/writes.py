"""What a node's agent may write about jobs: only its own placements' logs, metrics and checkpoints.

A node's token proves which node speaks, nothing more. Every job write an agent sends is checked
against the placements of that node: log lines only into the stream (role) of a placement of the
job's current attempt there, training metrics only for jobs placed there, checkpoint commits only
for the current attempt's placement there and only under the job's own checkpoint prefix. A write
of another node's job is refused (and kept for staff); a write of an attempt that has moved on is
dropped quietly (fencing: that is how a cut-off node's late messages look).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..models import Placement, TrainingJob
from ..storage.objectstore import checkpoint_prefix
from .placement_reports import foreign_placement


class RefusedWrite(Exception):
    """The node may not make this write; the message says why (sent to the agent, kept for staff)."""


@dataclass(frozen=True)
class Target:
    job_id: int
    attempt: int
    role: str
    current: bool  # the attempt is the job's current one: otherwise the write is stale


WriteKey = tuple[int, int, int, str]  # (node, job, attempt, role)


def placement_target(node_id: int, job_id: int, attempt: int, role: str) -> Target | None:
    """The node's placement of (job, attempt) in `role` (stale when the attempt is not current);
    None when the job is gone (deleted). Raises RefusedWrite for the current attempt of a job
    when this node holds no such placement: that is another node's job."""
    key = (node_id, job_id, attempt, role)
    target = placement_targets([key])[key]
    if isinstance(target, str):
        raise RefusedWrite(target)
    return target


def placement_targets(keys: Iterable[WriteKey]) -> dict[WriteKey, Target | None | str]:
    """placement_target of many writes (several nodes' log batches) in two queries at most; a
    refused write's value is the reason it is refused."""
    wanted = set(keys)
    found: dict[WriteKey, Target | None | str] = {}
    if not wanted:
        return found
    rows = Placement.objects.filter(
        node_id__any={key[0] for key in wanted}, attempt__job_id__any={key[1] for key in wanted},
    ).values_list("node_id", "attempt__job_id", "attempt__number", "role", "attempt__job__current_attempt")
    for node_id, job_id, attempt, role, current in rows:
        if (node_id, job_id, attempt, role) in wanted:
            found[(node_id, job_id, attempt, role)] = Target(job_id, attempt, role, current == attempt)
    missing = wanted - found.keys()
    currents = dict(TrainingJob.objects.filter(pk__any={key[1] for key in missing}).values_list("pk", "current_attempt")) \
        if missing else {}
    for key in missing:
        _, job_id, attempt, role = key
        current = currents.get(job_id)
        if current is None:
            found[key] = None
        elif current != attempt:
            found[key] = Target(job_id, attempt, role, current=False)  # an attempt that moved on: dropped quietly
        else:
            found[key] = foreign_placement(job_id, attempt, role)
    return found


def check_checkpoint_url(owner_id: int, job_id: int, url: str) -> None:
    """Under the job's checkpoint prefix in its owner's bucket, and nowhere else."""
    prefix = checkpoint_prefix(owner_id, job_id)
    if not url.startswith(prefix) or ".." in url[len(prefix):]:
        raise RefusedWrite(f"checkpoint URL {url[:200]!r} is outside job {job_id}'s checkpoints ({prefix})")


def metric_jobs(node_id: int, jobs: set[int]) -> dict[int, set[str]]:
    """Job id → the roles this node has held for it (any attempt), for the jobs that still exist.
    Raises RefusedWrite for an existing job this node never ran."""
    if not jobs:
        return {}
    roles: dict[int, set[str]] = {}
    for job_id, role in Placement.objects.filter(node_id=node_id, attempt__job_id__in=jobs).values_list("attempt__job_id", "role"):
        roles.setdefault(job_id, set()).add(role)
    foreign = set(TrainingJob.objects.filter(pk__in=jobs - set(roles)).values_list("pk", flat=True))
    if foreign:
        raise RefusedWrite(f"this node never ran job(s) {', '.join(map(str, sorted(foreign)))}: their metrics are not its to send")
    return roles
