"""The Training Job state machine: plain data, no Django.

Every status change goes through `check_transition`; `jobs.actions` applies it and records it.
"""

from __future__ import annotations

from .statuses import Status as S


class IllegalTransition(ValueError):
    """Raised when a job is asked to move to a status its current one cannot reach."""


TRANSITIONS: dict[str, frozenset[str]] = {
    # Failed without a placement: an execution backend refused or lost the job (e.g. Slurm rejects it)
    S.PENDING: frozenset({S.CREATING, S.TERMINATING, S.STOPPED, S.FAILED}),
    # nodes assigned, environment being prepared
    S.CREATING: frozenset({
        S.RUNNING, S.FAILED, S.PENDING, S.IMAGE_PULL_BACKOFF, S.FAILOVER_IN_PROGRESS,
        S.SPOT_INTERRUPTED, S.INTERNAL_ERROR, S.TERMINATING, S.STOPPED, S.COMPLETED,
    }),
    S.RUNNING: frozenset({
        S.COMPLETED, S.FAILED, S.FAILOVER_IN_PROGRESS, S.SPOT_INTERRUPTED,
        S.INTERNAL_ERROR, S.TERMINATING, S.STOPPED,
    }),
    # seed: Running → Pending - failoverinprogress → Running | Pending - internalerror
    S.FAILOVER_IN_PROGRESS: frozenset({
        S.CREATING, S.RUNNING, S.INTERNAL_ERROR, S.MAX_RETRIES_EXCEEDED, S.FAILED,
        S.TERMINATING, S.STOPPED,
    }),
    S.SPOT_INTERRUPTED: frozenset({S.CREATING, S.TERMINATING, S.STOPPED, S.FAILED}),
    # terminal statuses: the only way on is deletion
    S.COMPLETED: frozenset({S.TERMINATING}),
    S.FAILED: frozenset({S.TERMINATING}),
    S.STOPPED: frozenset({S.TERMINATING}),
    S.INTERNAL_ERROR: frozenset({S.TERMINATING}),
    S.MAX_RETRIES_EXCEEDED: frozenset({S.TERMINATING}),
    S.IMAGE_PULL_BACKOFF: frozenset({S.TERMINATING}),
    S.TERMINATING: frozenset(),
}


def can_transition(old: str, new: str) -> bool:
    return new in TRANSITIONS.get(old, frozenset())


def check_transition(old: str, new: str) -> None:
    """Raise IllegalTransition unless `old → new` is in the table."""
    if old not in TRANSITIONS:
        raise IllegalTransition(f"unknown status {old!r}")
    if new not in TRANSITIONS:
        raise IllegalTransition(f"unknown status {new!r}")
    if not can_transition(old, new):
        raise IllegalTransition(f"a job cannot go from {old!r} to {new!r}")
