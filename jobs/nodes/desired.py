"""A node's desired state: the placements it should run now, as keys (to compare with what a
console process last sent it) or as the agents' placement messages, for many nodes in one query."""

from __future__ import annotations

from django.conf import settings
from django.db.models import F, QuerySet

from nodeagent import protocol

from ..choices import JobStatus
from ..environments.offered import add_environments
from ..models import Placement
from ..models.attempts import HOLDING_STATES
from ..scheduling import policy
from . import placement_message


def _desired(node_ids: list[int]) -> QuerySet:
    """Placements that should run: current attempts of jobs that are Creating or Running."""
    return Placement.objects.filter(
        node_id__any=node_ids, state__in=HOLDING_STATES,
        attempt__job__status__in=[JobStatus.CREATING, JobStatus.RUNNING],
        attempt__number=F("attempt__job__current_attempt"),
    )


def desired_keys(node_ids: list[int]) -> dict[int, frozenset[str]]:
    """The placement keys each node should run now, for many nodes in one query (the console
    process compares them with what it last sent each node: jobs.channel.heartbeats)."""
    keys: dict[int, set[str]] = {}
    for node_id, job_id, attempt, role in _desired(node_ids).values_list(
        "node_id", "attempt__job_id", "attempt__number", "role",
    ):
        keys.setdefault(node_id, set()).add(protocol.placement_key(job_id, attempt, role))
    return {node_id: frozenset(k) for node_id, k in keys.items()}


def desired_placements(node_id: int) -> list[protocol.Placement]:
    """What should run on this node now: current attempts of jobs that are Creating or Running."""
    return desired_placements_of([node_id])[0]


def desired_placements_of(node_ids: list[int]) -> list[list[protocol.Placement]]:
    """desired_placements of each node, read in one query for all (a fleet's nodes are sent
    theirs hundreds at a time as a scheduler run places a backlog); the message itself is
    jobs.nodes.placement_message's, the same for a Slurm step."""
    placements = _desired(node_ids).order_by("node_id", "attempt__job_id", "node_rank")
    by_node: dict[int, list[protocol.Placement]] = {node_id: [] for node_id in node_ids}
    chosen: dict[int, tuple[str, str]] = {}
    grace = settings.JOB_STOP_GRACE_SECONDS
    for row in placement_message.rows(placements):
        by_node[row.node_id].append(placement_message.build(row, grace=grace))
        chosen[row.attempt__job_id] = (row.attempt__job__framework, row.attempt__job__framework_version)
    # the warm pool's hints (keep / reuse prepared files) and each job's training environment,
    # each in one query for all the nodes; a policy keeps the placements' order
    flat = add_environments(policy.current().agent_hints([p for node_id in node_ids for p in by_node[node_id]]), chosen)
    result, start = [], 0
    for node_id in node_ids:
        result.append(flat[start:start + len(by_node[node_id])])
        start += len(by_node[node_id])
    return result
