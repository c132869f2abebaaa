"""How long a node may stay silent before the watchdog declares it Lost (plain arithmetic).

The grace (NODE_LOST_AFTER_SECONDS) is a promise about the dead: a node that stops is declared
Lost within it. The watchdog runs every `watch` seconds and counts from when a node's newest
heartbeat was *sent*, so it must act once that heartbeat is `grace − watch` old, less the
watchdog's own lateness (a run starts a little after its tick and takes a while); a live node's
newest stored heartbeat is at most a beat plus the console's read lag old, so that still leaves
live nodes a whole beat of slack. Only a console that reads heartbeats later than that slack
(a backlog of its own) gives every node more time, for the part of its lateness beyond it.
"""

from __future__ import annotations

# how late a watchdog run may declare after its tick: in 5,000-job drains on two cores its runs
# started up to 0.8 s late and took up to 0.8 s (benchmarks/fleet/)
WATCHDOG_LATENESS = 1.5
# the most a console reading late gives every node on top of its limit: a dead node is declared
# however far behind the console is. Not "another grace": with a 10 s grace that was 10 s, and a
# console on a starved machine reading beats 15 s late declared its live fleet Lost
MAX_LATENESS_ALLOWANCE = 60.0


def silence_limit(grace: float, watch: float, beat: float, read_lag: float) -> float:
    """Seconds since a node's newest heartbeat was sent after which the watchdog declares it Lost.

    `read_lag` is how late the console has lately stored heartbeats (sent → written, seconds).
    The allowance for it is at most another grace or MAX_LATENESS_ALLOWANCE, whichever is more:
    a dead node is declared, however late the console reads."""
    limit = grace - watch - WATCHDOG_LATENESS
    slack = limit - 2 * beat  # a live node's newest beat is at most `beat + read_lag` old
    allowance = min(max(0.0, read_lag - slack), max(grace, MAX_LATENESS_ALLOWANCE))
    return limit + allowance


def settings_problem(grace: float, watch: float, beat: float) -> str | None:
    """Why these settings cannot keep the promise without declaring live nodes Lost, or None."""
    if beat * 3 > grace:
        return f"NODE_HEARTBEAT_SECONDS={beat:g} leaves fewer than 3 beats in NODE_LOST_AFTER_SECONDS={grace:g}"
    if watch + WATCHDOG_LATENESS + 2 * beat > grace:
        return (f"NODE_WATCH_SECONDS={watch:g} + 2 × NODE_HEARTBEAT_SECONDS={beat:g} + {WATCHDOG_LATENESS:g} s is more than "
                f"NODE_LOST_AFTER_SECONDS={grace:g}: a live node between two beats would look silent")
    return None
