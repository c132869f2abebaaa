"""The capacity ledger: per node, which GPUs are held and by what (plain data, no Django).

Every reader of capacity (the scheduler, a job's waiting reason, the node pages and the nodes
API) reads this one ledger, so they cannot disagree. A GPU is, in this order:

- unhealthy: the agent reported it failed; nothing may use it;
- job: held by a placement of a job that should run (Creating, Running, Terminating);
- stopping: held by a placement whose job left those statuses, only until the stop grace ends
  (SIGTERM → grace → SIGKILL on the agent): after that it holds nothing, whether or not the
  agent confirmed the stop;
- warm: used by a finished placement and kept warm for its owner's next compatible job until
  the keep-alive ends. A cache, never a reservation: any job that would otherwise wait takes it;
- free.

Node-wide facts sit beside the GPUs: a Training Workspace's reservation (only its jobs may use
the node), a cordon, and whether the agent is online (no new placement otherwise).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum


class GpuUse(StrEnum):
    FREE = "free"
    UNHEALTHY = "unhealthy"
    JOB = "job"
    STOPPING = "stopping"
    WARM = "warm"


@dataclass(frozen=True)
class NodeInfo:
    node_id: int
    name: str
    server_type: str
    gpus: tuple[int, ...]
    unhealthy: frozenset[int] = frozenset()
    online: bool = True  # connected and not lost
    cordoned: bool = False
    cordon_reason: str = ""


@dataclass(frozen=True)
class JobHold:
    """The GPUs one placement holds on one node."""

    node_id: int
    gpus: tuple[int, ...]
    job_id: int
    job_name: str
    owner_id: int
    placement_id: int = 0
    spot: bool = False
    workspace_id: int | None = None
    started: float = 0.0  # when its attempt was placed (the newest spot job is preempted first)
    stop_requested_at: datetime | None = None  # None: its job should be running


@dataclass(frozen=True)
class WarmHold:
    """The GPUs a finished placement used, kept warm for its owner until `expires_at`."""

    node_id: int
    gpus: tuple[int, ...]
    placement_id: int
    job_id: int
    job_name: str
    owner_id: int
    expires_at: datetime


@dataclass(frozen=True)
class Reservation:
    node_id: int
    workspace_id: int
    workspace_name: str
    owner_id: int
    draining: bool = False  # leaves the workspace once its jobs end: no new placement


@dataclass(frozen=True)
class GpuState:
    index: int
    use: GpuUse
    hold: JobHold | WarmHold | None = None
    until: datetime | None = None  # stopping: the end of the grace; warm: the end of the keep-alive


@dataclass
class NodeLedger:
    node: NodeInfo
    gpus: dict[int, GpuState]
    reservation: Reservation | None = None

    @property
    def schedulable(self) -> bool:
        return self.node.online and not self.node.cordoned

    def indices(self, use: GpuUse) -> frozenset[int]:
        return frozenset(i for i, state in self.gpus.items() if state.use is use)

    def holds(self, use: GpuUse) -> dict[int, JobHold | WarmHold]:
        return {i: state.hold for i, state in self.gpus.items() if state.use is use and state.hold is not None}

    @property
    def busy(self) -> bool:
        """Some job holds a GPU here (running or still stopping)."""
        return any(state.use in (GpuUse.JOB, GpuUse.STOPPING) for state in self.gpus.values())

    def job_ids(self) -> set[int]:
        return {s.hold.job_id for s in self.gpus.values() if s.use in (GpuUse.JOB, GpuUse.STOPPING) and s.hold}


@dataclass
class Ledger:
    nodes: dict[int, NodeLedger]
    now: datetime
    # (node id, GPU index, holders): a GPU two placements hold at once; must stay empty
    conflicts: list[tuple[int, int, tuple[int, ...]]] = field(default_factory=list)

    def node(self, node_id: int) -> NodeLedger:
        return self.nodes[node_id]

    def job_gpus(self, job_id: int) -> dict[int, frozenset[int]]:
        """Node id → GPUs the job holds (running or stopping)."""
        held: dict[int, set[int]] = {}
        for node in self.nodes.values():
            for index, state in node.gpus.items():
                if state.use in (GpuUse.JOB, GpuUse.STOPPING) and state.hold and state.hold.job_id == job_id:
                    held.setdefault(node.node.node_id, set()).add(index)
        return {node_id: frozenset(gpus) for node_id, gpus in held.items()}


def holds_now(hold: JobHold, now: datetime, stop_grace: timedelta) -> bool:
    """A placement holds its GPUs while its job should run, and after that only within the grace."""
    return hold.stop_requested_at is None or now < hold.stop_requested_at + stop_grace


def build(
    nodes: Iterable[NodeInfo],
    jobs: Iterable[JobHold],
    warm: Iterable[WarmHold],
    reservations: Iterable[Reservation],
    now: datetime,
    stop_grace: timedelta,
) -> Ledger:
    """The ledger of these nodes at `now`. Holds on unknown nodes or GPUs are ignored."""
    ledger = Ledger(nodes={}, now=now)
    for info in nodes:
        states = {
            i: GpuState(i, GpuUse.UNHEALTHY if i in info.unhealthy else GpuUse.FREE) for i in info.gpus
        }
        ledger.nodes[info.node_id] = NodeLedger(info, states)
    for hold in jobs:
        node = ledger.nodes.get(hold.node_id)
        if node is None or not holds_now(hold, now, stop_grace):
            continue
        use = GpuUse.JOB if hold.stop_requested_at is None else GpuUse.STOPPING
        until = None if hold.stop_requested_at is None else hold.stop_requested_at + stop_grace
        for index in hold.gpus:
            current = node.gpus.get(index)
            if current is None:
                continue
            if current.use in (GpuUse.JOB, GpuUse.STOPPING) and current.hold is not None:
                ledger.conflicts.append((hold.node_id, index, (current.hold.job_id, hold.job_id)))
                continue
            # a failed GPU still held by the placement that was on it stays the placement's until it stops
            node.gpus[index] = GpuState(index, use, hold, until)
    # the newest keep-alive wins where two finished placements used the same GPU
    for kept in sorted(warm, key=lambda h: h.expires_at):
        node = ledger.nodes.get(kept.node_id)
        if node is None or kept.expires_at <= now:
            continue
        for index in kept.gpus:
            current = node.gpus.get(index)
            if current is not None and current.use in (GpuUse.FREE, GpuUse.WARM):
                node.gpus[index] = GpuState(index, GpuUse.WARM, kept, kept.expires_at)
    for reservation in reservations:
        if reservation.node_id in ledger.nodes:
            ledger.nodes[reservation.node_id].reservation = reservation
    return ledger
