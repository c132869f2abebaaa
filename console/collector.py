"""Python's garbage collector in a long-running console process, set for short pauses.

In the fleet benchmark a daphne serving a thousand agents stopped for 0.3-0.4 s every three to
five seconds (timed with `gc.callbacks`): full collections, which hold the GIL while they walk
every object the process tracks, so the event loop and the store threads all wait,
acknowledgements included. A wave of agent messages keeps its temporaries (messages, rows,
model instances) alive while its store call runs; with a young collection every 700 new
objects they lived through several and were promoted to the oldest generation, and enough
promotions trip a full collection.

So a server process, once it has imported everything (`prepare_for_serving`):
- freezes what exists then: Django and the apps, ~120,000 objects that live as long as the
  process and that no collection needs to walk again (`gc.freeze`);
- collects the youngest generation only after YOUNG_COLLECTION_AFTER new container objects
  (10,000), so a burst's temporaries are mostly freed by reference counting before they are
  promoted; garbage in reference cycles is still collected, in those young passes;
- logs every collection that stopped it for SLOW_PAUSE_SECONDS or longer (WARNING, logger
  `console.collector`), so a pause is seen where it happens (the fleet benchmark counts them).

In a drain of 5,000 jobs on a thousand nodes: 700 and the freeze, five full collections of up
to 0.18 s; 10,000, none over 50 ms. A request's database connection must not wait for the
collector (console.request_connections): with rarer young passes, the connections of finished
API requests piled up until PostgreSQL refused more clients.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

from console.env import env_int

log = logging.getLogger(__name__)

# new container objects between young collections (CPython's default: 700)
YOUNG_COLLECTION_AFTER = env_int("GC_YOUNG_COLLECTION_AFTER", 10_000, minimum=100)
SLOW_PAUSE_SECONDS = 0.05


def prepare_for_serving() -> None:
    gc.collect()  # what importing made and dropped goes first: frozen objects are never freed
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_AFTER, middle, oldest)
    if _report_slow_pauses not in gc.callbacks:
        gc.callbacks.append(_report_slow_pauses)


_started = [0.0]


def _report_slow_pauses(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
        return
    paused = time.perf_counter() - _started[0]
    if paused >= SLOW_PAUSE_SECONDS:
        log.warning("garbage collection of generation %d paused this process for %.3f s (%d objects freed)",
                    info["generation"], paused, info["collected"])
