"""Warm-pool decisions (workspaces.warm_pool): plain data, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from workspaces.warm_pool import JobConfig, WarmEntry, newest, outcome, warm_nodes

NOW = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
ALICE, BOB = 1, 2
JOB = JobConfig(job_id=9, owner_id=ALICE, server_type="g2", image="trainer:1", script_url="s3://b/train.py", node_count=1)


def entry(node: int = 1, owner: int = ALICE, ended_minutes_ago: float = 2, keep: float = 10, **fields) -> WarmEntry:
    ended = NOW - timedelta(minutes=ended_minutes_ago)
    values = {
        "node_id": node, "node_name": f"node-{node}", "owner_id": owner, "job_id": 5, "job_name": "first",
        "server_type": "g2", "image": "trainer:1", "script_url": "s3://b/train.py",
        "ended_at": ended, "expires_at": ended + timedelta(minutes=keep),
    }
    values.update(fields)
    return WarmEntry(**values)


def test_only_a_compatible_entry_of_the_same_user_makes_a_node_warm_for_a_job():
    assert set(warm_nodes([entry()], JOB, NOW)) == {1}
    for other in (entry(owner=BOB), entry(image="trainer:2"), entry(script_url="s3://b/other.py"), entry(server_type="g3")):
        assert warm_nodes([other], JOB, NOW) == {}


def test_the_latest_job_to_end_decides_the_keep_alive_of_a_node_and_key():
    old = entry(ended_minutes_ago=30, job_name="older")
    new = entry(ended_minutes_ago=1, job_name="newer")
    assert newest([old, new]) == [new]


def test_placed_on_warm_nodes_the_job_starts_warm():
    result = outcome(JOB, [1], [entry()], NOW)
    assert result.started_warm
    assert result.note == "Started warm on node-1: environment reused from job first"
    assert result.reuse[1].job_name == "first"


def test_partly_warm_when_only_some_nodes_fitted():
    job = JobConfig(9, ALICE, "g2", "trainer:1", "s3://b/train.py", node_count=2)
    result = outcome(job, [1, 2], [entry()], NOW)
    assert not result.started_warm and set(result.reuse) == {1}
    assert result.note.startswith("Partly warm: node-1 reused job first's environment; 1 node(s) were prepared from scratch")


def test_cold_because_the_warm_nodes_were_taken():
    result = outcome(JOB, [2], [entry()], NOW, {1: "busy (not enough free GPUs)"})
    assert result.note == "Cold start: the warm nodes of job first (node-1) were busy (not enough free GPUs)"


def test_cold_because_the_keep_alive_expired():
    result = outcome(JOB, [1], [entry(ended_minutes_ago=15)], NOW)
    assert not result.started_warm
    assert result.note == "Cold start: the keep-alive of job first's nodes expired at 11:55:00 UTC"


def test_cold_because_of_a_different_image_or_script():
    assert outcome(JOB, [1], [entry(image="trainer:0")], NOW).note == (
        "Cold start: your warm nodes (node-1, job first) hold a different image (trainer:0)"
    )
    assert outcome(JOB, [1], [entry(script_url="s3://b/old.py")], NOW).note == (
        "Cold start: your warm nodes (node-1, job first) hold a different training script (s3://b/old.py)"
    )


def test_cold_with_nothing_warm_says_so_and_another_users_entries_do_not_count():
    assert outcome(JOB, [1], [entry(owner=BOB)], NOW).note == "Cold start: no job of yours left warm nodes for this configuration"
    assert outcome(JOB, [1], [entry(server_type="g3")], NOW).note == "Cold start: your warm nodes (node-1) are of another server type"
