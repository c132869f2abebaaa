"""The state machine: the transition table, and jobs.actions.transition recording each move."""

from __future__ import annotations

import pytest

from jobs import actions
from jobs.choices import JobStatus as S
from jobs.models import JobStatusChange, TrainingJob
from jobs.states import TRANSITIONS, IllegalTransition, can_transition, check_transition

LEGAL = sorted((old, new) for old, targets in TRANSITIONS.items() for new in targets)
TERMINAL = [S.COMPLETED, S.FAILED, S.STOPPED, S.INTERNAL_ERROR, S.MAX_RETRIES_EXCEEDED, S.IMAGE_PULL_BACKOFF]


def test_every_status_has_a_row_in_the_table():
    assert set(TRANSITIONS) == set(S.values)


@pytest.mark.parametrize(("old", "new"), LEGAL)
def test_it_allows_every_transition_in_the_table(old, new):
    check_transition(old, new)
    assert can_transition(old, new)


def test_the_seed_lifecycles_are_legal():
    for path in [
        [S.PENDING, S.CREATING, S.RUNNING, S.COMPLETED],
        [S.PENDING, S.CREATING, S.RUNNING, S.FAILOVER_IN_PROGRESS, S.RUNNING],
        [S.PENDING, S.CREATING, S.RUNNING, S.FAILOVER_IN_PROGRESS, S.INTERNAL_ERROR],
        [S.PENDING, S.CREATING, S.RUNNING, S.SPOT_INTERRUPTED, S.CREATING],
        [S.PENDING, S.CREATING, S.IMAGE_PULL_BACKOFF, S.TERMINATING],
    ]:
        for old, new in zip(path, path[1:], strict=False):
            check_transition(old, new)


@pytest.mark.parametrize(("old", "new"), [
    (S.PENDING, S.RUNNING),
    (S.PENDING, S.COMPLETED),
    (S.PENDING, S.PENDING),
    (S.RUNNING, S.PENDING),
    (S.RUNNING, S.CREATING),
    (S.SPOT_INTERRUPTED, S.RUNNING),
    (S.TERMINATING, S.PENDING),
    (S.TERMINATING, S.RUNNING),
    *[(terminal, S.RUNNING) for terminal in TERMINAL],
    *[(terminal, S.PENDING) for terminal in TERMINAL],
])
def test_it_refuses_illegal_transitions(old, new):
    assert not can_transition(old, new)
    with pytest.raises(IllegalTransition, match="cannot go from"):
        check_transition(old, new)


def test_terminal_statuses_lead_only_to_terminating():
    for status in TERMINAL:
        assert TRANSITIONS[status] == frozenset({S.TERMINATING})


@pytest.mark.parametrize(("old", "new"), [("Paused", S.RUNNING), (S.PENDING, "Deleted")])
def test_it_refuses_unknown_statuses(old, new):
    with pytest.raises(IllegalTransition, match="unknown status"):
        check_transition(old, new)


def test_creating_a_job_records_its_first_history_row(make_job):
    job = make_job()
    assert job.status == S.PENDING
    rows = list(job.status_changes.values_list("old_status", "new_status", "reason"))
    assert rows == [("", S.PENDING, "Created")]


def test_a_transition_writes_a_history_row_with_old_new_reason_and_time(make_job):
    job = make_job()
    moved = actions.transition(job.pk, S.CREATING, "Nodes assigned")
    assert moved.status == S.CREATING
    job.refresh_from_db()
    assert (job.status, job.status_reason) == (S.CREATING, "Nodes assigned")
    change = job.status_changes.last()
    assert (change.old_status, change.new_status, change.reason) == (S.PENDING, S.CREATING, "Nodes assigned")
    assert change.created_at is not None and change.created_at.tzinfo is not None


def test_a_sequence_of_transitions_is_recorded_in_order(make_job):
    job = make_job()
    actions.transition(job.pk, S.CREATING, "Nodes assigned")
    actions.transition(job.pk, S.RUNNING, "All processes started")
    actions.transition(job.pk, S.COMPLETED, "Exit code 0")
    rows = list(job.status_changes.values_list("old_status", "new_status"))
    assert rows == [("", S.PENDING), (S.PENDING, S.CREATING), (S.CREATING, S.RUNNING), (S.RUNNING, S.COMPLETED)]


def test_an_illegal_transition_raises_and_changes_nothing(make_job):
    job = make_job()
    with pytest.raises(IllegalTransition):
        actions.transition(job.pk, S.COMPLETED, "should not happen")
    job.refresh_from_db()
    assert (job.status, job.status_reason) == (S.PENDING, "Waiting to be scheduled")
    assert JobStatusChange.objects.filter(job=job).count() == 1
    assert TrainingJob.objects.filter(pk=job.pk, status=S.PENDING).exists()
