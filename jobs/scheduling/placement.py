"""Gang placement of jobs on the capacity ledger: plain data in, decisions out (no Django).

A job needs `node_count` distinct nodes of its server type, each with `gpus_per_node` GPUs,
all at once or not at all. Requests come in priority order (failovers, then on-demand, then
spot; FIFO within each) and each one, in turn:

1. is placed on GPUs that are free or held warm (its owner's warm GPUs first, then free ones,
   then other users' warm GPUs, whose hold is released: warm holds are a cache). Nodes that
   need no warm hold released come first, then nodes warm for this job's environment, then
   the fullest (best fit, so whole nodes stay free for big jobs);
2. otherwise claims GPUs that are being released (stopping jobs) and, for an on-demand job,
   GPUs that spot jobs hold — those spot jobs are preempted, newest first. Claimed GPUs go to
   no later request of this run, so the job gets them as soon as they are released;
3. otherwise waits, with a reason that names what blocks it.

Later requests may still be placed when an earlier one waits (backfill). The policies of the
shared cluster (quotas, workspaces) come in as an `Admission` and as fields of the request.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .capacity import GpuUse, JobHold, Ledger, NodeLedger, WarmHold
from .decision import Admission, Assignment, Decision, JobRequest


@dataclass
class _Pools:
    """What one node offers one request, after this run's earlier decisions."""

    node: NodeLedger
    free: list[int]
    own_warm: list[int]
    other_warm: list[int]  # soonest keep-alive end first
    releasing: list[int]
    spot: dict[int, JobHold]  # GPU → running spot placement (on-demand requests only)

    @property
    def ready(self) -> int:
        return len(self.free) + len(self.own_warm) + len(self.other_warm)

    def releasable(self) -> int:
        return self.ready + len(self.releasing) + len(self.spot)


class _Run:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        # node → GPU → (owner, claimed) of what this run placed there or promised to a waiting job
        self.taken: dict[int, dict[int, tuple[int, bool]]] = {}
        self.preempted: set[int] = set()  # spot jobs asked to stop in this run
        self._typed: dict[str, list[NodeLedger]] = {}
        # node → (free, warm, stopping, running spot) GPU indices, as the ledger read them
        self._sets: dict[int, tuple[frozenset[int], frozenset[int], frozenset[int], frozenset[int]]] = {}
        for node in ledger.nodes.values():
            self._typed.setdefault(node.node.server_type, []).append(node)
            spot = frozenset(
                i for i, st in node.gpus.items() if st.use is GpuUse.JOB and isinstance(st.hold, JobHold) and st.hold.spot
            )
            self._sets[node.node.node_id] = (
                node.indices(GpuUse.FREE), node.indices(GpuUse.WARM), node.indices(GpuUse.STOPPING), spot,
            )
        # server type → free-GPU count → (name, node id) of the nodes with that many free GPUs,
        # sorted (kept up to date by take)
        self._free = {node_id: len(sets[0]) for node_id, sets in self._sets.items()}
        self._by_free: dict[str, list[list[tuple[str, int]]]] = {}
        most = max((len(n.gpus) for n in ledger.nodes.values()), default=0)
        for node_id, free in sorted(self._free.items(), key=lambda item: ledger.nodes[item[0]].node.name):
            buckets = self._by_free.setdefault(ledger.nodes[node_id].node.server_type, [[] for _ in range(most + 1)])
            buckets[free].append((ledger.nodes[node_id].node.name, node_id))

    def take(self, node_id: int, gpus: Iterable[int], owner_id: int, claimed: bool) -> None:
        self.taken.setdefault(node_id, {}).update({index: (owner_id, claimed) for index in gpus})
        node = self.ledger.nodes[node_id]
        buckets = self._by_free[node.node.server_type]
        before = self._free[node_id]
        self._free[node_id] = len(self._sets[node_id][0] - self.taken[node_id].keys())
        entry = (node.node.name, node_id)
        del buckets[before][bisect.bisect_left(buckets[before], entry)]
        bisect.insort(buckets[self._free[node_id]], entry)

    def fullest_with(self, server_type: str, at_least: int) -> Iterator[NodeLedger]:
        """Nodes of a type with at least this many free GPUs, the fullest first (best fit; by
        name within a count): the common placement looks at a handful of nodes, not at all."""
        buckets = self._by_free.get(server_type, [])
        for count in range(at_least, len(buckets)):
            for _, node_id in buckets[count]:
                yield self.ledger.nodes[node_id]

    def eligible_pools(self, request: JobRequest) -> list[_Pools]:
        """What each node this request may use offers it. Nodes that could not give it enough
        GPUs even by preemption are left out: a quick count over sets first, the pools only for
        the few that might do."""
        need = request.gpus_per_node
        wanted = []
        for node in self._typed.get(request.server_type, []):
            if not _eligible(node, request):
                continue
            free, warm, releasing, spot = self._sets[node.node.node_id]
            taken = self.taken.get(node.node.node_id, {}).keys()
            usable = free | warm | releasing if request.spot else free | warm | releasing | spot
            if len(usable - taken) >= need:
                wanted.append(self.pools(node, request))
        return wanted

    def pools(self, node: NodeLedger, request: JobRequest) -> _Pools:
        taken = self.taken.get(node.node.node_id, {})
        free, own, other, releasing, spot = [], [], [], [], {}
        warm_order = []
        for index, state in sorted(node.gpus.items()):
            if index in taken:
                continue
            if state.use is GpuUse.FREE:
                free.append(index)
            elif state.use is GpuUse.WARM and isinstance(state.hold, WarmHold):
                if state.hold.owner_id == request.owner_id:
                    own.append(index)
                else:
                    warm_order.append((state.hold.expires_at, index))
            elif state.use is GpuUse.STOPPING:
                releasing.append(index)
            elif state.use is GpuUse.JOB and isinstance(state.hold, JobHold) and state.hold.spot:
                if state.hold.job_id in self.preempted:
                    releasing.append(index)
                elif not request.spot:
                    spot[index] = state.hold
        other = [index for _, index in sorted(warm_order)]
        return _Pools(node, free, own, other, releasing, spot)


def _eligible(node: NodeLedger, request: JobRequest) -> bool:
    if node.node.server_type != request.server_type or node.node.node_id in request.excluded_nodes:
        return False
    if not node.schedulable:
        return False
    reservation = node.reservation
    if request.workspace_id is None:
        return reservation is None
    return reservation is not None and reservation.workspace_id == request.workspace_id and not reservation.draining


def _pick(pools: _Pools, count: int, warm_for_it: bool) -> tuple[tuple[int, ...], tuple[WarmHold, ...]]:
    """The GPUs of one node for one placement: on a node warm for the job's environment its
    owner's warm GPUs first; otherwise free GPUs first (a warm hold is kept for a job that can
    use it); others' warm GPUs last."""
    first = pools.own_warm + pools.free if warm_for_it else pools.free + pools.own_warm
    chosen = (first + pools.other_warm)[:count]
    holds = {}
    for index in chosen:
        state = pools.node.gpus[index]
        if state.use is GpuUse.WARM and isinstance(state.hold, WarmHold):
            holds[state.hold.placement_id] = state.hold
    return tuple(sorted(chosen)), tuple(holds.values())


def _place_on_free(run: _Run, request: JobRequest) -> list[Assignment] | None:
    """The common case without looking at every node: enough nodes with enough free GPUs (no
    warm hold to release). Nodes warm for the job's environment first, then the fullest that
    fit. None when there are not enough: the full look (_place, _claim) decides."""
    need = request.gpus_per_node
    chosen: list[NodeLedger] = []
    warm = [run.ledger.nodes[n] for n in sorted(request.warm_nodes) if n in run.ledger.nodes]
    for node in [*warm, *run.fullest_with(request.server_type, need)]:
        if node in chosen or run._free[node.node.node_id] < need or not _eligible(node, request):
            continue
        chosen.append(node)
        if len(chosen) == request.node_count:
            break
    else:
        return None
    assignments = []
    for node in chosen:
        gpus, holds = _pick(run.pools(node, request), need, node.node.node_id in request.warm_nodes)
        run.take(node.node.node_id, gpus, request.owner_id, claimed=False)
        assignments.append(Assignment(node.node.node_id, node.node.name, gpus, holds))
    return assignments


def _place(run: _Run, request: JobRequest, pools: list[_Pools]) -> list[Assignment] | None:
    need = request.gpus_per_node
    fitting = [p for p in pools if p.ready >= need]
    if len(fitting) < request.node_count:
        return None

    def cost(p: _Pools) -> tuple[int, bool, int, str]:
        unheld = len(p.free) + len(p.own_warm)
        evictions = max(0, need - unheld)
        return (evictions, p.node.node.node_id not in request.warm_nodes, unheld, p.node.node.name)

    assignments = []
    for p in sorted(fitting, key=cost)[: request.node_count]:
        gpus, holds = _pick(p, need, p.node.node.node_id in request.warm_nodes)
        run.take(p.node.node.node_id, gpus, request.owner_id, claimed=False)
        assignments.append(Assignment(p.node.node.node_id, p.node.node.name, gpus, holds))
    return assignments


def _claim(run: _Run, request: JobRequest, pools: list[_Pools], decision: Decision) -> str | None:
    """Promise the request GPUs that are being released (and preempt spot jobs for them)."""
    need = request.gpus_per_node
    fitting = [p for p in pools if p.releasable() >= need]
    if len(fitting) < request.node_count:
        return None

    def cost(p: _Pools) -> tuple[int, int, int, str]:
        short = max(0, need - p.ready)
        spot_needed = max(0, short - len(p.releasing))
        return (spot_needed, short, p.releasable(), p.node.node.name)

    victims: list[int] = []
    claim: dict[int, frozenset[int]] = {}
    for p in sorted(fitting, key=cost)[: request.node_count]:
        chosen = (p.own_warm + p.free + p.other_warm + p.releasing)[:need]
        by_job: dict[int, list[int]] = {}
        for index, hold in p.spot.items():
            by_job.setdefault(hold.job_id, []).append(index)
        # spot jobs already giving way for this request free their GPUs here too; then the
        # newest spot jobs on this node give way, each with all of its GPUs
        order = [job for job in victims if job in by_job]
        order += sorted((job for job in by_job if job not in victims), key=lambda job: -p.spot[by_job[job][0]].started)
        for job_id in order:
            if len(chosen) >= need:
                break
            if job_id not in victims:
                victims.append(job_id)
            chosen += by_job[job_id][: need - len(chosen)]
        claim[p.node.node.node_id] = frozenset(chosen)
        run.take(p.node.node.node_id, chosen, request.owner_id, claimed=True)
    for job_id in victims:
        if job_id not in run.preempted:
            run.preempted.add(job_id)
            decision.preempt[job_id] = request.job_id
    decision.claimed[request.job_id] = claim
    spot_jobs = len(victims)
    if spot_jobs:
        return f"Waiting for {spot_jobs} spot job(s) to release their GPUs (they were asked to stop)"
    return "Waiting for GPUs that stopping jobs are releasing"


# What a request can use, whoever owns it: server type, GPUs per node, nodes, spot, workspace,
# excluded nodes (the fields schedule() compares requests by)
_Shape = tuple[str, int, int, bool, int | None, frozenset[int]]


def schedule(requests: Iterable[JobRequest], ledger: Ledger, admission: Admission | None = None) -> Decision:
    """Place what fits, claim what is being released, say why the rest waits."""
    run = _Run(ledger)
    decision = Decision()
    # capacity only shrinks during a run: a shape that neither fit nor could claim cannot later
    # (what a request can use does not depend on its owner), so a long queue of jobs that wait
    # costs one look per shape; what blocks them is counted once per shape, after the run
    hopeless: dict[_Shape, list[JobRequest]] = {}
    for request in requests:
        if admission is not None and (blocked := admission.block(request)):
            decision.waiting[request.job_id] = blocked
            continue
        shape: _Shape = (request.server_type, request.gpus_per_node, request.node_count, request.spot,
                 request.workspace_id, request.excluded_nodes)
        if shape in hopeless:
            hopeless[shape].append(request)
            continue
        assignments = _place_on_free(run, request)
        if assignments is None:
            pools = run.eligible_pools(request)
            assignments = _place(run, request, pools)
        if assignments is not None:
            decision.placed[request.job_id] = assignments
        elif (claimed := _claim(run, request, pools, decision)) is not None:
            decision.waiting[request.job_id] = claimed
        else:
            hopeless[shape] = [request]
            continue
        if admission is not None:
            admission.admit(request)
    _explain_hopeless(hopeless.values(), run, decision)
    return decision


def _explain_hopeless(shapes: Iterable[list[JobRequest]], run: _Run, decision: Decision) -> None:
    """Why the jobs of each shape that could neither fit nor claim wait, as the run leaves the
    cluster (what they will wait for until the next run). Counted once per shape: counted again
    after every placement, as it was, a full cluster's queue of many shapes made that count most
    of a run's time (every GPU of the type, for each shape, after each of hundreds of placements)."""
    for requests in shapes:
        found = _blockers(requests[0], run)
        reasons: dict[int, str] = {}  # owner → reason: "in use by your jobs" is the owner's own
        for request in requests:
            if request.owner_id not in reasons:
                reasons[request.owner_id] = _describe(request, found)
            decision.waiting[request.job_id] = reasons[request.owner_id]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


@dataclass
class _Blockers:
    """What holds the capacity a request shape would need (the same for every owner)."""

    fitting: int
    typed: int
    in_use: Counter[int]  # owner → GPUs in use by their jobs (or placed for them in this run)
    held: Counter[str]  # stopping / claimed / unhealthy → GPUs
    nodes: Counter[str]  # offline / cordoned / excluded / reserved → nodes


def _blockers(request: JobRequest, run: _Run) -> _Blockers:
    """Count, over every node of the request's type, what keeps it from fitting (no pools built:
    a full cluster with a long queue asks this once per job shape)."""
    need = request.gpus_per_node
    typed = run._typed.get(request.server_type, [])
    found = _Blockers(0, len(typed), Counter(), Counter(), Counter())
    for node in typed:
        node_id = node.node.node_id
        if not _eligible(node, request):
            if node_id in request.excluded_nodes:
                found.nodes["excluded"] += 1
            elif not node.node.online:
                found.nodes["offline"] += 1
            elif node.node.cordoned:
                found.nodes["cordoned"] += 1
            else:
                found.nodes["reserved"] += 1
            continue
        here = run.taken.get(node_id, {})
        free, warm, _, _ = run._sets[node_id]
        if len((free | warm) - here.keys()) >= need:
            found.fitting += 1
            continue
        for index, state in node.gpus.items():
            if index in here:
                owner, promised = here[index]
                if promised:
                    found.held["claimed"] += 1
                else:
                    found.in_use[owner] += 1
            elif state.use is GpuUse.JOB and state.hold is not None:
                found.in_use[state.hold.owner_id] += 1
            elif state.use in (GpuUse.STOPPING, GpuUse.UNHEALTHY):
                found.held[state.use.value] += 1
    return found


def _describe(request: JobRequest, found: _Blockers) -> str:
    count = request.node_count
    wanted = (f"Waiting for {count} × {request.server_type} {'node' if count == 1 else 'nodes'} "
              f"with {_plural(request.gpus_per_node, 'free GPU')}")
    if not found.typed:
        return f"{wanted}: no {request.server_type} node is registered"
    parts = [f"{found.fitting} {'fits' if found.fitting == 1 else 'fit'} now"]
    if found.typed < count:
        parts.append(f"only {_plural(found.typed, 'node')} of this type {'exists' if found.typed == 1 else 'exist'}")
    mine = found.in_use[request.owner_id]
    others = sum(found.in_use.values()) - mine
    for n, what in ((others, "in use by other users' jobs"), (mine, "in use by your jobs"),
                    (found.held["stopping"], "held by stopping jobs"),
                    (found.held["claimed"], "promised to other waiting jobs"),
                    (found.held["unhealthy"], "unhealthy")):
        if n:
            parts.append(f"{_plural(n, 'GPU')} {what}")
    reserved = "reserved by Training Workspaces" if request.workspace_id is None else "outside this job's Training Workspace"
    for key, what in (("offline", "offline"), ("cordoned", "cordoned"), ("excluded", "excluded after this job's fault"),
                      ("reserved", reserved)):
        if found.nodes[key]:
            parts.append(f"{_plural(found.nodes[key], 'node')} {what}")
    return f"{wanted}: " + "; ".join(parts)


def explain(request: JobRequest, ledger: Ledger) -> str:
    """Why `request` cannot be placed now, naming what holds the capacity it would need."""
    return _describe(request, _blockers(request, _Run(ledger)))
