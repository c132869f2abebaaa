"""Lines the console itself writes into a job's log streams (decisions, failover markers).

They use sequence numbers no agent uses: 0 opens an attempt (agents count from 1), and
CONSOLE_SEQ_BASE + n follows an attempt's own lines, so the unique key never collides.
"""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime

from django.db import transaction

from monitoring.ingest import publish_lines
from monitoring.models import LogLine

CONSOLE_SEQ_BASE = 10**12
_counter = itertools.count(1)


def write(job_id: int, stream: str, attempt: int, text: str, opening: bool = False) -> None:
    """Store one line in `stream` of `attempt` and show it to watchers after the commit."""
    seq = 0 if opening else CONSOLE_SEQ_BASE + int(time.time() * 1000) % 10**9 * 100 + next(_counter) % 100
    ts = time.time()
    LogLine.objects.get_or_create(
        job_id=job_id, stream=stream, attempt=attempt, seq=seq,
        defaults={"ts": datetime.fromtimestamp(ts, tz=UTC), "text": text},
    )
    transaction.on_commit(lambda: publish_lines(job_id, stream, attempt, [[seq, ts, text]]))
