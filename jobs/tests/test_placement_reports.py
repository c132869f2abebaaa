"""What placement reports do to a job (jobs.channel.placement_reports), without a database: the rules a
batch of a fleet's reports and a single report share."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.channel.placement_reports import (
    OK,
    STALE,
    JobRow,
    PlacementReport,
    PlacementRow,
    apply_reports,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def job(status: str = "Creating", attempt: int = 1) -> JobRow:
    return JobRow(pk=7, status=status, current_attempt=attempt)


def placements(nodes: int = 1, state: str = "assigned") -> list[PlacementRow]:
    return [PlacementRow(pk=100 + n, node_id=n, role="master" if n == 0 else f"worker-{n}", state=state) for n in range(nodes)]


def r(node: int, state: str, role: str = "", attempt: int = 1, **fields) -> tuple[int, PlacementReport]:
    return node, PlacementReport(7, attempt, role or ("master" if node == 0 else f"worker-{node}"), state, **fields)


def test_a_job_runs_once_every_node_runs_its_command():
    rows = placements(2)
    applied = apply_reports(job(), rows, [r(0, "preparing"), r(0, "running"), r(1, "preparing")], NOW)
    assert applied.transitions == [] and [p.state for p in rows] == ["running", "preparing"]
    applied = apply_reports(job(), rows, [r(1, "running")], NOW)
    assert [t.status for t in applied.transitions] == ["Running"] and applied.running
    assert all(p.started_at == NOW for p in rows)


def test_a_short_job_runs_and_completes_within_one_batch_with_both_history_steps():
    rows = placements(1)
    applied = apply_reports(job(), rows, [
        r(0, "preparing"), r(0, "running"), r(0, "exited", exit_code=0, output_url="s3://results/jobs/7/attempt-1/master/"),
    ], NOW)
    assert applied.verdicts == [OK, OK, OK]
    assert [(t.status, t.result_url) for t in applied.transitions] == [
        ("Running", None), ("Completed", "s3://results/jobs/7/attempt-1/"),
    ]
    assert applied.ended == "Completed" and applied.freed and rows[0].state == "exited" and rows[0].ended_at == NOW


def test_a_job_completes_only_when_every_node_exited_zero():
    rows = placements(2, state="running")
    first = apply_reports(job("Running"), rows, [r(0, "exited", exit_code=0)], NOW)
    assert first.transitions == [] and first.freed
    second = apply_reports(job("Running"), rows, [r(1, "exited", exit_code=0)], NOW)
    assert [(t.status, t.result_url) for t in second.transitions] == [("Completed", "")]


def test_the_reasons_say_what_is_true_of_a_job_of_one_node_and_of_several():
    one = apply_reports(job(), placements(1), [r(0, "running"), r(0, "exited", exit_code=0)], NOW)
    assert [t.reason for t in one.transitions] == ["The command runs on its node", "The command exited with code 0"]
    rows = placements(2)
    two = apply_reports(job(), rows, [r(0, "running"), r(1, "running"), r(0, "exited", exit_code=0), r(1, "exited", exit_code=0)], NOW)
    assert [t.reason for t in two.transitions] == ["The command runs on all 2 nodes", "Every node's command exited with code 0"]


def test_reports_of_an_attempt_that_moved_on_change_nothing():
    rows = placements(1, state="running")
    applied = apply_reports(job("Running", attempt=2), rows, [r(0, "exited", attempt=1, exit_code=1)], NOW)
    assert applied.verdicts == [STALE] and rows[0].state == "running" and not applied.changed


def test_a_report_of_a_deleted_job_is_stale():
    assert apply_reports(None, [], [r(0, "running")], NOW).verdicts == [STALE]


def test_a_placement_that_ended_stays_ended():
    rows = placements(1, state="lost")
    applied = apply_reports(job("Running"), rows, [r(0, "exited", exit_code=0)], NOW)
    assert applied.verdicts == [STALE] and rows[0].state == "lost" and not applied.freed


def test_a_report_about_another_nodes_placement_is_refused_and_changes_nothing():
    rows = placements(1)
    applied = apply_reports(job(), rows, [r(5, "running", role="master")], NOW)
    assert applied.verdicts[0].kind == "refused"
    assert applied.verdicts[0].reason == "this node has no placement of job 7, attempt 1, as master"
    assert rows[0].state == "assigned" and not applied.changed


def test_a_failed_exit_asks_for_the_failover_decision_and_stops_there():
    rows = placements(2, state="running")
    applied = apply_reports(job("Running"), rows, [r(0, "exited", exit_code=1), r(1, "exited", signal=15)], NOW)
    assert applied.verdicts == [OK] and applied.follow_up is not None
    assert (applied.follow_up.kind, applied.follow_up.placement.pk) == ("interrupted", 100)
    assert rows[1].state == "running"  # not applied yet: the decision comes first


def test_an_agent_failure_is_a_failure_whatever_the_exit_code():
    rows = placements(1, state="preparing")
    applied = apply_reports(job(), rows, [r(0, "exited", exit_code=0, failure="image_pull")], NOW)
    assert applied.follow_up is not None and applied.follow_up.kind == "interrupted"


def test_the_last_exit_of_a_job_being_deleted_asks_for_its_removal():
    rows = placements(2, state="running")
    first = apply_reports(job("Terminating"), rows, [r(0, "exited", signal=15)], NOW)
    assert first.follow_up is None and first.freed
    last = apply_reports(job("Terminating"), rows, [r(1, "exited", signal=15)], NOW)
    assert last.follow_up is not None and last.follow_up.kind == "remove"


def test_an_exit_after_the_job_was_decided_frees_its_gpus_and_decides_nothing():
    rows = placements(2, state="running")
    applied = apply_reports(job("Pending - failoverinprogress"), rows, [r(1, "exited", signal=15)], NOW)
    assert applied.verdicts == [OK] and applied.freed and applied.transitions == [] and applied.follow_up is None


def test_long_messages_and_failures_are_cut_to_their_columns():
    rows = placements(1, state="running")
    apply_reports(job("Running"), rows, [r(0, "exited", exit_code=3, message="x" * 5000, failure="f" * 99)], NOW)
    assert len(rows[0].message) == 1000 and len(rows[0].failure) == 32


STATES = st.sampled_from(["preparing", "running", "exited"])
REPORTS = st.lists(
    st.tuples(st.integers(0, 2), STATES, st.sampled_from([0, 0, 0, 1]), st.sampled_from([1, 1, 1, 2])), max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(nodes=st.integers(1, 3), reports=REPORTS, status=st.sampled_from(["Creating", "Running", "Terminating", "Failed"]))
def test_a_batch_decides_exactly_what_its_reports_one_by_one_decide(nodes, reports, status):
    """Whatever a backlog brings together, the rows end as if each report had been applied alone."""
    items = [r(node, state, attempt=attempt, **({"exit_code": code} if state == "exited" else {}))
             for node, state, code, attempt in reports]
    rows_together, rows_alone = placements(nodes), placements(nodes)
    together = apply_reports(job(status), rows_together, items, NOW)

    alone_verdicts, alone_transitions, current = [], [], job(status)
    for item in items[:len(together.verdicts)]:
        applied = apply_reports(current, rows_alone, [item], NOW)
        alone_verdicts += applied.verdicts
        alone_transitions += applied.transitions
        current = JobRow(current.pk, applied.status(current), current.current_attempt)
    assert together.verdicts == alone_verdicts
    assert together.transitions == alone_transitions
    assert rows_together == rows_alone
