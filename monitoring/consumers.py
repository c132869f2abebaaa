"""The Logs tab's WebSocket: the recent backlog (or, on a reconnect, what the page missed), then
new lines as they are stored, each batch with the cursor after it.

Lines are read from the database after the connection's cursor (monitoring.log_cursor), never
taken from the fan-out events themselves: an event only wakes the reader up. So a dropped event, a slow
socket or a reconnect cannot lose a line — the page reconnects with `?after=<cursor>` and gets
exactly the lines after its last batch.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async

from console.lib.sockets import CLOSE_RETRY
from jobs.consumers import JobSocket

from . import log_cursor, queries
from .events import logs_group

log = logging.getLogger(__name__)

PAGE_LINES = 2000  # lines per message while catching up
CATCH_UP_LIMIT = 20_000  # the page keeps this many; further behind, it starts afresh from the tail


def _start(job_id: int, after: log_cursor.Positions | None) -> tuple[str, queries.Page, list[str]]:
    """What a new connection sends first: the backlog, or the lines after the page's cursor."""
    streams = queries.streams(job_id)
    if after is not None and queries.count_after(job_id, after, CATCH_UP_LIMIT + 1) <= CATCH_UP_LIMIT:
        return "log.append", queries.after(job_id, after, limit=PAGE_LINES), streams
    return "log.backlog", queries.tail(job_id), streams


def _after_param(scope: dict[str, Any]) -> log_cursor.Positions | None:
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("after")
    if not values:
        return None
    try:
        return log_cursor.decode(values[0])
    except log_cursor.BadCursor:
        return None  # start afresh: the backlog


class JobLogsConsumer(JobSocket):
    """/ws/jobs/<id>/logs/: the owner's Logs tab (the login and ownership checks: JobSocket)."""

    follower: asyncio.Task[None] | None = None

    async def start(self, user: Any) -> None:
        # join before the first read: a line stored meanwhile wakes the follower, which reads
        # after the first read's position, so nothing falls between the two
        self.group = logs_group(self.job_id)
        self.wake = asyncio.Event()
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        kind, page, streams = await database_sync_to_async(_start, thread_sensitive=False)(
            self.job_id, _after_param(self.scope),
        )
        self.positions = page.positions
        await self.send_json({"type": kind, "streams": streams, "lines": page.lines,
                              "cursor": log_cursor.encode(page.positions)})
        if page.full:
            self.wake.set()
        self.follower = asyncio.create_task(self._follow())

    async def disconnect(self, code: int) -> None:
        if self.follower is not None:
            self.follower.cancel()
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def log_lines(self, event: dict[str, Any]) -> None:
        """Lines were stored (monitoring.ingest, jobs.console_log): read them from the database."""
        self.wake.set()

    async def _follow(self) -> None:
        """Read and send what follows the position whenever woken; many wake-ups, one read."""
        read = database_sync_to_async(queries.after, thread_sensitive=False)
        while True:
            await self.wake.wait()
            self.wake.clear()
            try:
                page = await read(self.job_id, self.positions, limit=PAGE_LINES)
            except Exception:  # the database is away: the page reconnects and resumes at its cursor
                log.warning("could not read the logs of job %s; closing the watcher's socket", self.job_id, exc_info=True)
                await self.close(code=CLOSE_RETRY)
                return
            if page.lines:
                self.positions = page.positions
                await self.send_json({"type": "log.append", "lines": page.lines,
                                      "cursor": log_cursor.encode(page.positions)})
            if page.full:
                self.wake.set()
