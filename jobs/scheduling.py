"""Gang placement of jobs on nodes: plain data in, decisions out (no Django, no network).

A job needs `node_count` distinct nodes of its server type, each with `gpus_per_node` free
GPUs, all at once or not at all. Jobs are considered in FIFO order; a job that does not fit
waits with a reason, and smaller jobs behind it may still be placed now (backfill).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeSlot:
    node_id: int
    name: str
    server_type: str
    free_gpus: tuple[int, ...]  # indices of healthy GPUs no placement holds


@dataclass(frozen=True)
class JobRequest:
    job_id: int
    server_type: str
    gpus_per_node: int
    node_count: int
    # nodes this job must not use (e.g. cordoned for its own earlier fault)
    excluded_nodes: frozenset[int] = frozenset()
    # if set, only these nodes may be used (a workspace's reserved nodes)
    allowed_nodes: frozenset[int] | None = None
    # tried first: nodes warm for this job (its owner's prepared environment is kept there)
    preferred_nodes: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Assignment:
    node_id: int
    node_name: str
    gpu_indices: tuple[int, ...]


@dataclass
class Decision:
    placed: dict[int, list[Assignment]] = field(default_factory=dict)
    waiting: dict[int, str] = field(default_factory=dict)
    # free GPU indices per node once the placed jobs are counted
    remaining: dict[int, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class SpotHolding:
    """GPUs a running spot job holds; `order` grows with its start (newest is preempted first)."""

    job_id: int
    order: float
    gpus: dict[int, tuple[int, ...]]  # node id -> GPU indices


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def waiting_reason(request: JobRequest, available: int) -> str:
    return (
        f"waiting for {request.node_count} × {request.server_type} "
        f"{'node' if request.node_count == 1 else 'nodes'} with {_plural(request.gpus_per_node, 'free GPU')}; "
        f"{available} available"
    )


def schedule(requests: list[JobRequest], nodes: list[NodeSlot]) -> Decision:
    """Place what fits, in FIFO order with backfill. `requests` must be in FIFO order."""
    free = {node.node_id: list(node.free_gpus) for node in nodes}
    by_id = {node.node_id: node for node in nodes}
    decision = Decision()
    for request in requests:
        candidates = [
            node for node in nodes
            if node.server_type == request.server_type
            and node.node_id not in request.excluded_nodes
            and (request.allowed_nodes is None or node.node_id in request.allowed_nodes)
            and len(free[node.node_id]) >= request.gpus_per_node
        ]
        if len(candidates) < request.node_count:
            decision.waiting[request.job_id] = waiting_reason(request, len(candidates))
            continue
        # warm nodes first (no preparation); then best fit: the fullest nodes first, so whole
        # nodes stay free for big jobs
        candidates.sort(key=lambda node: (node.node_id not in request.preferred_nodes, len(free[node.node_id]), node.name))
        chosen = candidates[: request.node_count]
        assignments = []
        for node in chosen:
            indices = tuple(sorted(free[node.node_id])[: request.gpus_per_node])
            free[node.node_id] = [i for i in free[node.node_id] if i not in indices]
            assignments.append(Assignment(node.node_id, by_id[node.node_id].name, indices))
        decision.placed[request.job_id] = assignments
    decision.remaining = {node_id: tuple(sorted(indices)) for node_id, indices in free.items()}
    return decision


def _fits(request: JobRequest, nodes: list[NodeSlot], free: dict[int, set[int]]) -> bool:
    usable = [
        n for n in nodes
        if n.server_type == request.server_type and n.node_id not in request.excluded_nodes
        and (request.allowed_nodes is None or n.node_id in request.allowed_nodes)
        and len(free.get(n.node_id, ())) >= request.gpus_per_node
    ]
    return len(usable) >= request.node_count


def plan_preemption(request: JobRequest, nodes: list[NodeSlot], spot: list[SpotHolding]) -> list[int] | None:
    """The spot jobs to interrupt (newest first) so that `request` fits; None when even all would not do.

    `nodes` carry the GPUs free now (after this run's placements). Spot jobs run only on
    capacity that on-demand jobs do not need: an on-demand job that waits takes it back.
    """
    free = {n.node_id: set(n.free_gpus) for n in nodes}
    victims: list[int] = []
    for holding in sorted(spot, key=lambda h: -h.order):
        if _fits(request, nodes, free):
            break
        if not any(node_id in free for node_id in holding.gpus):
            continue  # its nodes are not ones this job could use
        victims.append(holding.job_id)
        for node_id, gpus in holding.gpus.items():
            if node_id in free:
                free[node_id] |= set(gpus)
    return victims if victims and _fits(request, nodes, free) else None


def master_port(job_id: int, attempt: int) -> int:
    """A rendezvous port per attempt, spread so concurrent jobs on one master rarely collide."""
    return 20000 + (job_id * 31 + attempt * 7) % 20000
