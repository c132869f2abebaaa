"""The clock offset an agent's heartbeats are corrected by: a late-read message never makes a
node look fresher than it is."""

from jobs.channel import clock_offset
from jobs.channel.clock_offset import ClockOffset

AHEAD = 7.0  # the console's clock is 7 s ahead of the agent's


def test_a_hello_read_late_does_not_make_the_heartbeats_look_fresher():
    clock = ClockOffset()
    assert clock.observe(received=1000.0 + AHEAD + 40.0, sent=1000.0) == AHEAD + 40.0  # behind a backlog
    offset = clock.observe(received=1005.0 + AHEAD + 0.01, sent=1005.0)  # the next beat, read at once
    assert abs(offset - AHEAD) < 0.02
    # a later backlog delays the beats; they keep the offset, so the node's stamps stay when it sent them
    for i in range(20):
        assert abs(clock.observe(received=1010.0 + 5 * i + AHEAD + 25.0, sent=1010.0 + 5 * i) - AHEAD) < 0.02


def test_an_agent_clock_stepped_forward_is_followed_at_once_and_one_stepped_back_within_the_window():
    clock = ClockOffset()
    clock.observe(received=100.0 + AHEAD, sent=100.0)
    assert clock.observe(received=105.0 + AHEAD, sent=105.0 + 3.0) == AHEAD - 3.0  # agent 3 s ahead now
    stepped_back = [clock.observe(received=110.0 + 5 * i + AHEAD, sent=110.0 + 5 * i - 10.0)
                    for i in range(2 * clock_offset.WINDOW)]
    assert stepped_back[0] == AHEAD - 3.0  # at first it looks older than it is, never fresher
    assert stepped_back[-1] == AHEAD + 10.0


def test_no_sample_yet_means_no_correction():
    assert ClockOffset().offset == 0.0
