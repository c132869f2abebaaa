"""Python's garbage collector in a long-running console process: what never dies is not walked.

In the fleet benchmark a daphne serving a thousand agents stopped for 0.3-0.4 s every five
seconds or so (timed with `gc.callbacks`): full collections. A wave of agent messages keeps its
temporaries (messages, rows, model instances) alive while its store call runs, so they live
through a young collection or two and are promoted; enough promotions trip a full collection,
which holds the GIL while it walks every object the process tracks, and the event loop and the
store threads all wait, acknowledgements included.

About 120,000 of those objects (Django and the apps, imported before serving) live as long as
the process: once everything is imported they are frozen (`gc.freeze`), and no collection walks
them again. The collection thresholds stay CPython's: raised so that young collections come
rarer, garbage that holds database connections lived long enough for the console to run out
of PostgreSQL connections ("too many clients") under the benchmark's API load.
"""

from __future__ import annotations

import gc


def freeze_imported() -> None:
    gc.collect()  # what importing made and dropped goes first: frozen objects are never freed
    gc.freeze()
