"""Log lines and attempt reports on their way into the spool.

A LogStream numbers the lines of one (job, attempt, stream) and batches them: a `logs` message
is spooled every FLUSH_SECONDS, every MAX_BATCH lines or before it grows past the protocol's
byte limit, whichever comes first; a line longer than the protocol allows is split. Lines are
numbered when they arrive (not when flushed) so the order the console stores is the order
the process printed, across stdout and stderr.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from . import protocol
from .protocol_checks import MAX_BATCH_BYTES, MAX_BATCH_LINES, MAX_LINE_CHARS
from .spool import Spool

FLUSH_SECONDS = 0.1
MAX_BATCH = MAX_BATCH_LINES
# a batch is sent before its JSON grows past the protocol's limit (escapes can double a
# character: count the text twice over to stay clear of MAX_BATCH_BYTES)
BATCH_BYTES = MAX_BATCH_BYTES // 2
LINE_OVERHEAD = 40  # "[seq, ts, ...]" around each text


class Outbox:
    """The only writer of job messages: everything goes through the spool, in order."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool

    def logs(self, job_id: int, attempt: int, stream: str, lines: list[list[Any]]) -> None:
        self.spool.append(dict(protocol.LogBatch(
            type="logs", msg_id=0, job_id=job_id, attempt=attempt, stream=stream, lines=lines,
        )))

    def metrics(self, samples: list[list[Any]]) -> None:
        self.spool.append(dict(protocol.MetricBatch(type="metrics", msg_id=0, samples=samples)))

    def attempt(self, placement: protocol.Placement, state: protocol.PlacementState, **fields: Any) -> None:
        message: dict[str, Any] = dict(
            type="attempt", msg_id=0, job_id=placement["job_id"], attempt=placement["attempt"],
            role=placement["role"], state=state,
        )
        message.update(fields)
        self.spool.append(message)


    def fault(self, event: dict[str, Any]) -> None:
        self.spool.append({"type": "fault", "msg_id": 0, **event})

    def checkpoint(self, placement: protocol.Placement, step: int, url: str) -> None:
        self.spool.append(dict(protocol.CheckpointCommit(
            type="checkpoint", msg_id=0, job_id=placement["job_id"], attempt=placement["attempt"],
            role=placement["role"], step=step, url=url,
        )))


class LogStream:
    def __init__(self, outbox: Outbox, job_id: int, attempt: int, stream: str) -> None:
        self.outbox = outbox
        self.job_id, self.attempt, self.stream = job_id, attempt, stream
        self.seq = 0
        self._buffer: list[list[Any]] = []
        self._bytes = 0
        self._timer: asyncio.TimerHandle | None = None

    def line(self, text: str) -> None:
        # a line longer than the protocol allows goes on in continuation lines of its own
        for start in range(0, max(len(text), 1), MAX_LINE_CHARS):
            chunk = text[start:start + MAX_LINE_CHARS]
            self.seq += 1
            self._buffer.append([self.seq, time.time(), chunk])
            self._bytes += len(chunk.encode("utf-8", errors="replace")) + LINE_OVERHEAD
            if len(self._buffer) >= MAX_BATCH or self._bytes >= BATCH_BYTES:
                self.flush()
        if self._buffer and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(FLUSH_SECONDS, self.flush)

    def info(self, text: str) -> None:
        self.line(f"[INFO] {text}")

    def warning(self, text: str) -> None:
        self.line(f"[WARN] {text}")

    def error(self, text: str) -> None:
        self.line(f"[ERROR] {text}")

    def flush(self) -> None:
        """Spool what is buffered now; call before an `attempt` report so lines come first."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._buffer:
            lines, self._buffer, self._bytes = self._buffer, [], 0
            self.outbox.logs(self.job_id, self.attempt, self.stream, lines)
