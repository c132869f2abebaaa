"""How far an agent's clock is from the console's, from the send stamps of its messages.

Each message the agent stamps (hello, heartbeats) gives one sample: when the console read it
minus when the agent says it sent it. That is the clocks' offset plus the message's delay — the
network, and any backlog in the console before the message was read — and a delay is never
negative, so the least sample is the truest. A hello read after 40 s behind a fleet
reconnecting gave an offset 40 s too large when it was the only sample, and every heartbeat of
that node then looked 40 s fresher than it was: behind a backlog, a killed node was declared
Lost that much late (46.6 s after the kill in the fleet benchmark, 32.5 s with the least sample).
With the least sample, a backlog can only make a node look older than it is, which the
watchdog allows for (the console's own lag), never fresher.

The least is taken over a window of samples (two halves, rotating), so that an agent clock
stepped back (NTP) is followed within WINDOW samples instead of never; one stepped forward is
followed at once.
"""

from __future__ import annotations

import math

WINDOW = 60  # samples per half: the offset is the least of the last 60–120 (5–10 min of heartbeats)


class ClockOffset:
    """Console time − agent time, as the least (received − sent) of the recent samples."""

    def __init__(self) -> None:
        self.current = self.previous = math.inf
        self.samples = 0

    def observe(self, received: float, sent: float) -> float:
        """Add one message's sample; returns the offset to add to the agent's stamps."""
        self.current = min(self.current, received - sent)
        self.samples += 1
        if self.samples >= WINDOW:
            self.previous, self.current, self.samples = self.current, math.inf, 0
        return self.offset

    @property
    def offset(self) -> float:
        least = min(self.current, self.previous)
        return 0.0 if least == math.inf else least
