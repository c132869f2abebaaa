"""The Training Workspace state machine: plain data, no Django models.

`workspaces.actions.transition` is the only code that applies it (and records history).
"""

from __future__ import annotations

from .choices import WorkspaceStatus as S


class IllegalTransition(ValueError):
    """A workspace was asked to move to a status its current one cannot reach."""


TRANSITIONS: dict[str, frozenset[str]] = {
    S.CREATING: frozenset({S.DEPLOYED, S.ERROR, S.TERMINATING, S.UPDATING}),
    S.DEPLOYED: frozenset({S.UPDATING, S.ERROR, S.TERMINATING}),
    S.UPDATING: frozenset({S.DEPLOYED, S.ERROR, S.TERMINATING}),
    S.ERROR: frozenset({S.DEPLOYED, S.UPDATING, S.CREATING, S.TERMINATING}),
    # the row is deleted once its nodes are released
    S.TERMINATING: frozenset(),
}


def check_transition(old: str, new: str) -> None:
    if old not in TRANSITIONS or new not in TRANSITIONS:
        raise IllegalTransition(f"unknown workspace status {old!r} or {new!r}")
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(f"a workspace cannot go from {old!r} to {new!r}")
