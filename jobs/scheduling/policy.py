"""The seam between the scheduler and the policies of a shared cluster.

`jobs` owns capacity and placement; the policies that shape it (Training Workspaces' reserved
nodes, the warm pool's preferences, quotas) live in `workspaces`, which depends on `jobs`, not
the other way round. `workspaces` installs its policy when Django starts
(workspaces.apps.WorkspacesConfig.ready); without it the cluster is one shared pool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from nodeagent import protocol

from .capacity import Ledger, Reservation
from .decision import Assignment, JobRequest

if TYPE_CHECKING:  # annotations only: this module runs without Django's ORM
    from django.db.models import QuerySet

    from ..models import TrainingJob


class PolicyRun(Protocol):
    """The policies' part in one scheduler run (an `Admission` for scheduling.schedule)."""

    held: dict[int, str]  # job id → why it keeps waiting whatever the capacity

    def shape(self, request: JobRequest) -> JobRequest: ...

    def block(self, request: JobRequest) -> str | None: ...

    def admit(self, request: JobRequest) -> None: ...

    def placed(self, started: Mapping[TrainingJob, Sequence[Assignment]]) -> None:
        """The jobs this run started (read before they were), with their placements."""
        ...


class ClusterPolicy(Protocol):
    def reservations(self) -> list[Reservation]: ...

    def reconcile(self, ledger: Ledger) -> bool:
        """Reserve and release nodes (under the scheduler lock); True when something changed."""
        ...

    def begin(self, waiting: Sequence[TrainingJob], ledger: Ledger) -> PolicyRun: ...

    def agent_hints(self, placements: list[protocol.Placement]) -> list[protocol.Placement]: ...


class _SharedPoolRun:
    held: dict[int, str] = {}

    def shape(self, request: JobRequest) -> JobRequest:
        return request

    def block(self, request: JobRequest) -> str | None:
        return None

    def admit(self, request: JobRequest) -> None:
        return None

    def placed(self, started: Mapping[TrainingJob, Sequence[Assignment]]) -> None:
        return None


class SharedPool:
    """No reservations, no preferences, no quotas."""

    def reservations(self) -> list[Reservation]:
        return []

    def reconcile(self, ledger: Ledger) -> bool:
        return False

    def begin(self, waiting: Sequence[TrainingJob], ledger: Ledger) -> PolicyRun:
        return _SharedPoolRun()

    def agent_hints(self, placements: list[protocol.Placement]) -> list[protocol.Placement]:
        return placements


_installed: ClusterPolicy = SharedPool()


def install(policy: ClusterPolicy) -> None:
    global _installed
    _installed = policy


def current() -> ClusterPolicy:
    return _installed


class Backend(Protocol):
    """Another execution backend (a Slurm cluster): it takes the waiting jobs of the server types
    it serves, and the agents' scheduler leaves them alone."""

    def others(self, waiting: QuerySet) -> QuerySet:
        """The waiting jobs this backend does not serve."""
        ...

    def notify(self, waiting: QuerySet) -> None:
        """Called in every scheduler run: start this backend's own pass (after the commit)."""
        ...

    def claims(self, server_type_id: int) -> bool:
        """A new job of this server type is this backend's: True, and its pass is asked for once
        the job is committed (no scheduler run in between)."""
        ...


_backends: list[Backend] = []


def install_backend(backend: Backend) -> None:
    if backend not in _backends:
        _backends.append(backend)


def claim_new(server_type_id: int) -> bool:
    """True when another backend takes a job of this server type as it is created: the agents'
    scheduler need not run for it."""
    return any(backend.claims(server_type_id) for backend in _backends)


def served_by_agents(waiting: QuerySet) -> QuerySet:
    """The waiting jobs the agents' scheduler places; each backend is told of the run."""
    for backend in _backends:
        backend.notify(waiting)
        waiting = backend.others(waiting)
    return waiting
