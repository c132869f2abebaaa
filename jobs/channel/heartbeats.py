"""Agents' heartbeats, off the database hot path: one book per console process.

A heartbeat only updates this process's in-memory book; every FLUSH_SECONDS the book is written
in one statement (jobs.nodes.registry.record_heartbeats), which also records that the console is
listening (the watchdog's proof that a silence was the node's, not the console's). A connection
whose node was declared Lost meanwhile (its row says disconnected) is told to connect again, as
one whose node a newer connection took over is closed: neither relies on a Redis event arriving. The time a
node counts from is when the agent *sent* its newest processed heartbeat, corrected by the clock
offset its messages show (jobs.channel.clock_offset): a backlog in the console cannot make a dead node look alive.

A connection that closed without the console asking (the agent process ended, its machine
reset the connection) is written down by the next flush (`closed`): that this process lived on
to flush is what makes the close evidence about the node, not about a console going down with
all its connections. The watchdog declares such a node Lost NODE_CLOSED_GRACE_SECONDS after
the close unless it connected again.

Each flush also compares, in one query, what every node of this process should run with what
its connection last sent it: a desired-state push lost on the way (Redis full or down, a
consumer's channel over capacity) is sent again within two flushes, whatever the agent reports.
The book only asks the connection to send it (`want_desired`, the one way a desired state is
sent: coalesced, off the connection's loop): reading it waits for the agents' database threads,
and the book's loop must never wait behind their backlog (a flush stalled for minutes would
stop the console's proof that it listens, and no killed node would be Lost). A connection whose
send is in flight is not asked again, nor one whose own reports still wait to be stored (they
change what it should run: under a backlog every node differs for a while, and re-reading them
all fed the backlog).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Protocol

from ..nodes import desired, registry
from .db import on_thread

log = logging.getLogger(__name__)
FLUSH_SECONDS = registry.FLUSH_INTERVAL.total_seconds()  # the watchdog counts silence up to the newest flush
# the book's own thread (and database connection): under a backlog of agent messages in the shared
# pool, the flush (the console's proof that it listens) must not wait minutes behind them, or
# the watchdog could not declare a killed node Lost; a disconnect's bookkeeping runs here too
BOOK_THREAD = ThreadPoolExecutor(1, thread_name_prefix="heartbeat-book")
STALE_CHECKS = 2  # flushes in a row that find a connection's desired state out of date (a push may be in flight)


class AgentConnection(Protocol):
    sent: frozenset[str]  # placement keys of the desired state it sent last
    desired_in_flight: bool  # a send of its desired state has begun and not ended
    reports_pending: bool  # its messages wait to be stored: a difference is expected, not a lost push

    async def superseded(self) -> None: ...

    async def declared_lost(self) -> None: ...

    def want_desired(self) -> None: ...  # send the desired state soon, off the caller's loop


class HeartbeatBook:
    def __init__(self) -> None:
        self.pending: dict[int, registry.Beat] = {}
        # (node id, session) → its open connection in this process
        self.connections: dict[tuple[int, int], AgentConnection] = {}
        self.stale: dict[tuple[int, int], int] = {}
        self.closes: list[registry.Close] = []  # closes not asked for, written at the next flush
        self.hello_lag = 0.0  # the longest a hello waited for its answer since the last flush
        self._task: asyncio.Task[None] | None = None

    def ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def watch(self, node_id: int, session: int, connection: AgentConnection) -> None:
        self.connections[(node_id, session)] = connection

    def forget(self, node_id: int, session: int) -> None:
        """The connection of this session closed: its beats not yet written must not be either
        (written after the disconnect, they would make the node look alive again)."""
        self.connections.pop((node_id, session), None)
        self.stale.pop((node_id, session), None)
        beat = self.pending.get(node_id)
        if beat is not None and beat.session == session:
            del self.pending[node_id]

    def closed(self, node_id: int, session: int, at: float) -> None:
        """The connection of this session closed without the console asking: evidence the
        node's agent is gone, once a flush of this (surviving) process writes it."""
        self.closes.append(registry.Close(node_id, session, datetime.fromtimestamp(at, tz=UTC)))

    def answered_late(self, seconds: float) -> None:
        """A hello was answered `seconds` after it arrived: until it is, the node's beats wait
        behind it, so a console slow to answer hellos (a fleet connecting at once) reads late
        and must give every node that much longer (its read lag)."""
        self.hello_lag = max(self.hello_lag, seconds)

    def beat(self, node_id: int, session: int, sent_at: float) -> None:
        self.pending[node_id] = registry.Beat(node_id, session, datetime.fromtimestamp(sent_at, tz=UTC))

    async def flush(self) -> None:
        beats, self.pending = self.pending, {}
        closes, self.closes = self.closes, []
        hello_lag, self.hello_lag = self.hello_lag, 0.0
        try:
            flushed = await on_thread(BOOK_THREAD, registry.record_heartbeats)(
                list(beats.values()), closes=closes, extra_lag=hello_lag)
        except Exception:
            log.warning("could not record %d heartbeat(s); keeping them for the next flush", len(beats), exc_info=True)
            flushed = registry.Flushed(busy=frozenset(beats))
            self.closes[:0] = closes
            self.hello_lag = max(self.hello_lag, hello_lag)
        for node_id in flushed.busy:
            self.pending.setdefault(node_id, beats[node_id])  # a newer beat that arrived meanwhile wins
        for node_ids, tell in ((flushed.replaced, "superseded"), (flushed.declared_lost, "declared_lost")):
            for node_id in node_ids:
                connection = self.connections.get((node_id, beats[node_id].session))
                if connection is not None:
                    # level-triggered: the Redis event that says so may have been dropped
                    try:
                        await getattr(connection, tell)()
                    except Exception:  # its socket went meanwhile: the book must go on
                        log.warning("could not close the connection of node %s", node_id, exc_info=True)

    async def check_desired(self) -> None:
        """Send again the desired state of connections that missed a change (see the module)."""
        watched = dict(self.connections)
        if not watched:
            return
        try:
            wanted = await on_thread(BOOK_THREAD, desired.desired_keys)(sorted({node_id for node_id, _ in watched}))
        except Exception:
            log.warning("could not read the desired state of %d node(s)", len(watched), exc_info=True)
            return
        for key, connection in watched.items():
            if connection.desired_in_flight or connection.reports_pending or wanted.get(key[0], frozenset()) == connection.sent:
                self.stale.pop(key, None)
                continue
            self.stale[key] = self.stale.get(key, 0) + 1
            if self.stale[key] >= STALE_CHECKS and key in self.connections:
                del self.stale[key]
                log.info("node %s missed a desired-state change; sending it again", key[0])
                connection.want_desired()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            await self.flush()
            await self.check_desired()


BOOK = HeartbeatBook()  # one per console process (daphne), shared by its agent connections
