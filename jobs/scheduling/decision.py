"""What a scheduler run is asked and what it decides (plain data, no Django): each waiting job's
request, the policies' `Admission`, and the decision: placements, waits, preemptions, claims.
The placement itself is jobs.scheduling.placement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from .capacity import WarmHold


@dataclass(frozen=True)
class JobRequest:
    job_id: int
    owner_id: int
    server_type: str
    gpus_per_node: int
    node_count: int
    spot: bool = False
    # a job in a Training Workspace runs only on the workspace's nodes; others never there
    workspace_id: int | None = None
    # nodes this job must not use (e.g. the one its own earlier attempt faulted on)
    excluded_nodes: frozenset[int] = frozenset()
    # nodes where this job's prepared environment is kept (a warm start skips preparation)
    warm_nodes: frozenset[int] = frozenset()


class Admission(Protocol):
    """Policies beyond capacity (quotas): asked in priority order, told what was admitted."""

    def block(self, request: JobRequest) -> str | None: ...

    def admit(self, request: JobRequest) -> None: ...


@dataclass(frozen=True)
class Assignment:
    node_id: int
    node_name: str
    gpu_indices: tuple[int, ...]
    # warm holds whose GPUs this placement takes: their hold ends now
    takes_warm: tuple[WarmHold, ...] = ()


@dataclass
class Decision:
    placed: dict[int, list[Assignment]] = field(default_factory=dict)
    waiting: dict[int, str] = field(default_factory=dict)
    # spot job id → the job it makes room for
    preempt: dict[int, int] = field(default_factory=dict)
    # job id → node id → GPUs promised to it while they are released
    claimed: dict[int, dict[int, frozenset[int]]] = field(default_factory=dict)


# Rendezvous ports stay below Linux's default ephemeral range (32768-60999): a port in it may
# already be the local end of any process's outgoing connection on the node (to PostgreSQL,
# S3, another rank), and the job's store then fails to listen ("DistNetworkError").
RENDEZVOUS_PORTS = range(20000, 32768)


def master_port(job_id: int, attempt: int) -> int:
    """A rendezvous port per attempt, spread so concurrent jobs on one master rarely collide."""
    return RENDEZVOUS_PORTS.start + (job_id * 31 + attempt * 7) % len(RENDEZVOUS_PORTS)
