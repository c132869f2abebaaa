"""Agents' heartbeats, off the database hot path: one book per console process.

A heartbeat only updates this process's in-memory book; every FLUSH_SECONDS the book is written
in one statement (jobs.nodes.record_heartbeats), which also records that the console is
listening (the watchdog's proof that a silence was the node's, not the console's). The time a
node counts from is when the agent *sent* its newest processed heartbeat, corrected by the clock
offset measured at its hello: a backlog in the console cannot make a dead node look alive.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from . import nodes
from .agent_db import agent_db

log = logging.getLogger(__name__)
FLUSH_SECONDS = 2.0


class HeartbeatBook:
    def __init__(self) -> None:
        self.pending: dict[int, nodes.Beat] = {}
        # node id → what to do when its beat turns out to come from a replaced session
        self.superseded: dict[tuple[int, int], Callable[[], Awaitable[None]]] = {}
        self._task: asyncio.Task | None = None

    def ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def watch(self, node_id: int, session: int, on_superseded: Callable[[], Awaitable[None]]) -> None:
        self.superseded[(node_id, session)] = on_superseded

    def forget(self, node_id: int, session: int) -> None:
        """The connection of this session closed: its beats not yet written must not be either
        (written after the disconnect, they would make the node look alive again)."""
        self.superseded.pop((node_id, session), None)
        beat = self.pending.get(node_id)
        if beat is not None and beat.session == session:
            del self.pending[node_id]

    def beat(self, node_id: int, session: int, sent_at: float) -> None:
        self.pending[node_id] = nodes.Beat(node_id, session, datetime.fromtimestamp(sent_at, tz=UTC))

    async def flush(self) -> None:
        beats, self.pending = self.pending, {}
        try:
            replaced = await agent_db(nodes.record_heartbeats)(list(beats.values()))
        except Exception:
            log.warning("could not record %d heartbeat(s); keeping them for the next flush", len(beats), exc_info=True)
            for node_id, beat in beats.items():
                self.pending.setdefault(node_id, beat)  # a newer beat that arrived meanwhile wins
            return
        for node_id in replaced:
            close = self.superseded.get((node_id, beats[node_id].session))
            if close is not None:
                await close()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            await self.flush()


BOOK = HeartbeatBook()  # one per console process (daphne), shared by its agent connections
