"""The watchdog's silence limit: a dead node declared within the grace, a live one never."""

import pytest

from jobs.nodes.liveness import WATCHDOG_LATENESS, settings_problem, silence_limit

GRACE, WATCH, BEAT = 30, 2, 5


def test_a_node_that_stops_is_declared_within_the_grace_of_its_last_heartbeat():
    # the watchdog runs every WATCH seconds: at worst it looks WATCH after the limit passed, and
    # its run may start and declare a little late
    assert silence_limit(GRACE, WATCH, BEAT, read_lag=0) + WATCH + WATCHDOG_LATENESS == GRACE
    # a drain's usual lateness in reading heartbeats costs nothing
    assert silence_limit(GRACE, WATCH, BEAT, read_lag=3) + WATCH + WATCHDOG_LATENESS == GRACE


# 76.5: the most allowed for (60 s) beyond the 16.5 s of lateness the slack absorbs
@pytest.mark.parametrize("read_lag", [0, 2, 10, 16.5, 17, 40, 46.5, 76.5])
def test_a_live_node_keeps_a_beat_of_slack_up_to_a_grace_of_console_lateness(read_lag):
    # a live node's newest stored heartbeat is at most one beat plus the read lag old
    oldest_live = BEAT + read_lag
    limit = silence_limit(GRACE, WATCH, BEAT, read_lag)
    assert limit - oldest_live >= BEAT


def test_a_console_reading_late_gives_at_most_a_minute_or_another_grace():
    # past that a dead node must still be declared, whatever the backlog
    assert silence_limit(GRACE, WATCH, BEAT, read_lag=600) == GRACE - WATCH - WATCHDOG_LATENESS + 60
    assert silence_limit(120, WATCH, BEAT, read_lag=600) == 120 - WATCH - WATCHDOG_LATENESS + 120


def test_with_the_10_s_grace_a_console_15_s_behind_still_spares_its_live_nodes():
    limit = silence_limit(10, 1, 2, read_lag=15)
    assert limit - (2 + 15) >= 2  # a beat of slack over the oldest a live node's beat can be


def test_settings_that_would_declare_live_nodes_lost_are_refused():
    assert settings_problem(GRACE, WATCH, BEAT) is None
    assert "fewer than 3 beats" in settings_problem(12, 1, 5)
    assert "NODE_WATCH_SECONDS=10" in settings_problem(18, 10, 5)
    assert settings_problem(16, 4, 5) is None  # 4 + 1.5 of lateness + two beats: just fits
    assert "NODE_WATCH_SECONDS=5" in settings_problem(16, 5, 5)
