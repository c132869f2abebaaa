"""The watchdog's silence limit: a dead node declared within the grace, a live one never."""

import pytest

from jobs.nodes.liveness import settings_problem, silence_limit

GRACE, WATCH, BEAT = 30, 2, 5


def test_a_node_that_stops_is_declared_within_the_grace_of_its_last_heartbeat():
    # the watchdog runs every WATCH seconds: at worst it looks WATCH after the limit passed
    assert silence_limit(GRACE, WATCH, BEAT, read_lag=0) + WATCH == GRACE
    assert silence_limit(GRACE, WATCH, BEAT, read_lag=3) + WATCH == GRACE  # a drain's usual lateness costs nothing


@pytest.mark.parametrize("read_lag", [0, 2, 10, 18, 19, 40, 48])
def test_a_live_node_keeps_a_beat_of_slack_up_to_a_grace_of_console_lateness(read_lag):
    # a live node's newest stored heartbeat is at most one beat plus the read lag old
    oldest_live = BEAT + read_lag
    limit = silence_limit(GRACE, WATCH, BEAT, read_lag)
    assert limit - oldest_live >= BEAT


def test_a_console_reading_late_gives_at_most_another_grace():
    # past that a dead node must still be declared, whatever the backlog
    assert silence_limit(GRACE, WATCH, BEAT, read_lag=600) == GRACE - WATCH + GRACE


def test_settings_that_would_declare_live_nodes_lost_are_refused():
    assert settings_problem(GRACE, WATCH, BEAT) is None
    assert "fewer than 3 beats" in settings_problem(12, 1, 5)
    assert "NODE_WATCH_SECONDS=10" in settings_problem(18, 10, 5)
