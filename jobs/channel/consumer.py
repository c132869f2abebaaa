"""The console's end of a node agent's WebSocket (protocol in nodeagent.protocol).

Thin: jobs.channel.socket checks each message and keeps a bad one from jamming the node; this
calls jobs.nodes.registry and, through jobs.channel.inbox, jobs.lifecycle / monitoring.ingest. A
connection's messages are stored in order: those that arrived while earlier ones were being
stored are handed over together, the process's store takes many nodes' handovers in one
transaction (jobs.channel.gather), and one cumulative `ack` answers each. Desired states are read the
same way, many nodes' in one query. Nothing on a connection's message loop waits for the
database (a heartbeat must not wait behind other nodes' messages). One connection per node:
while the node's connection is alive, only a hello that presents its session's resume secret
(the same agent process, back after a blip) opens a new session, and the older connection is
closed with 4409; any other hello is refused with 4423 and changes nothing (jobs.nodes.registry).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from django.conf import settings
from redis.exceptions import RedisError

from nodeagent import protocol
from nodeagent.protocol_checks import MAX_FRAME_MESSAGES, acknowledgeable

from ..nodes import desired, registry
from . import inbox
from .clock_offset import ClockOffset
from .db import OUTAGE_ERRORS, agent_db, call_with_retries, on_thread
from .gather import Gatherer
from .heartbeats import BOOK, BOOK_THREAD
from .node_sync import LISTENER
from .notify import node_group
from .socket import ProtocolConsumer, bearer_token

log = logging.getLogger(__name__)
# heartbeats in a row whose `running` differs from the desired state sent before it is sent again
# (a placement being stopped within its grace differs for a few beats: that is expected)
RESYNC_AFTER_DISAGREEMENTS = 3
REJOIN_EVERY_HEARTBEATS = 5
# one node's stored messages handed over at once (a reconnecting agent resends thousands), and
# the most the agent may send in one frame (the welcome's batch_limit)
MAX_BATCH = MAX_FRAME_MESSAGES
# a few threads of their own (AGENT_STORE_THREADS): the per-message retries are inside
# (jobs.channel.inbox), and hellos and desired-state reads do not queue behind a backlog of them
STORE_THREADS = ThreadPoolExecutor(settings.AGENT_STORE_THREADS, thread_name_prefix="agent-store")


class Entry(NamedTuple):
    """A node's message waiting to be answered, in order with the others."""

    message: Any  # a checked message; a refused one may be anything (a whole batched frame: a list)
    raw: str  # its text ("" for a message of a batched frame), kept for staff if it is refused
    refusal: str = ""  # refused before it was stored (malformed, …): answered in its turn, not stored


class Handover:
    """A node's messages handed to the store, in order; more may join until a call takes them."""

    def __init__(self, node_id: int, sender: str, entries: list[Entry]) -> None:
        self.node_id, self.sender, self.entries = node_id, sender, entries
        self.open = True

    def close(self) -> None:
        self.open = False

    def jobs(self) -> set[int]:
        """The jobs whose rows storing these messages locks: two calls that share one run in series."""
        return {entry.message["job_id"] for entry in self.entries if not entry.refusal and "job_id" in entry.message}


def _store(handovers: list[Handover]) -> list[list[inbox.Outcome]]:
    batches = {i: [entry.message for entry in h.entries if not entry.refusal] for i, h in enumerate(handovers)}
    stored = dict(zip([i for i in batches if batches[i]], inbox.store_batches(
        [(h.node_id, batches[i], h.sender) for i, h in enumerate(handovers) if batches[i]],
    ), strict=True))
    return [_in_order(h.entries, stored.get(i, [])) for i, h in enumerate(handovers)]


def _in_order(entries: list[Entry], stored: list[inbox.Outcome]) -> list[inbox.Outcome]:
    """Each entry's outcome: the refused ones' own, the others' from the store (which ends at an
    outage: nothing after it is answered)."""
    outcomes, results = [], iter(stored)
    for entry in entries:
        if entry.refusal:
            outcomes.append(inbox.Outcome(False, refusal=entry.refusal))
            continue
        outcome = next(results, None)
        if outcome is None:
            break
        outcomes.append(outcome)
        if outcome.outage:
            break
    return outcomes


# messages of many nodes stored in one transaction at most: each costs about ten statements
# whatever its size, and a fleet's first wave stored 512 at a time spent most of its time on them
# (benchmarks/agent_store.py: 2048 a call took 35 % less; the fleet's ack p99 fell 0.2-0.8 s)
STORE_BATCH_MESSAGES = 2048
# what the nodes hand over while earlier batches are stored goes in one transaction (jobs.channel.gather)
STORE = Gatherer(_store, STORE_THREADS, concurrency=settings.AGENT_STORE_THREADS, limit=STORE_BATCH_MESSAGES,
                 weight=lambda handover: len(handover.entries), taken=Handover.close, keys=Handover.jobs)
# desired states asked for meanwhile are read in one query (a scheduler run places hundreds)
DESIRED_THREADS = ThreadPoolExecutor(2, thread_name_prefix="agent-desired")
DESIRED = Gatherer(functools.partial(call_with_retries, desired.desired_placements_of), DESIRED_THREADS,
                   concurrency=2, limit=500)


class AgentConsumer(ProtocolConsumer):
    session = 0
    token = None
    sent: frozenset[str] = frozenset()  # placement keys of the desired state sent last
    disagreements = 0
    in_group = False
    drainer: asyncio.Task | None = None  # storing the inbox's messages (set up in connect)
    handover: Handover | None = None  # the drain's messages waiting in the store's queue
    desired_sender: asyncio.Task | None = None  # want_desired's send under way
    desired_wanted = False
    joining: asyncio.Task | None = None  # a periodic re-join of the node's group under way
    closing = False  # the console closes this connection itself (its close is no evidence about the node)
    said_goodbye = False  # the agent is exiting cleanly: the node is gone already

    async def connect(self) -> None:
        # accept first so a refusal can carry a readable message before the close
        await self.accept()
        self.beats = 0
        self.clock = ClockOffset()  # console time − agent time, from the send stamps of hello and heartbeats
        self.inbox: list[Entry] = []  # messages waiting for the drain, in order
        try:
            self.token = await agent_db(registry.authenticate)(bearer_token(self.scope))
        except registry.AgentRefused as refused:
            await self.refuse(str(refused))
            return
        except OUTAGE_ERRORS:
            await self.degraded("the console cannot reach its database")
            return
        self.accepting, self.sender = True, self.token.name

    async def disconnect(self, code: int) -> None:
        for task in (self.drainer, self.desired_sender, self.joining):
            if task is not None:
                task.cancel()  # what it did not acknowledge, the agent sends again
        if self.node_id is None:
            return
        BOOK.forget(self.node_id, self.session)
        if not self.closing and not self.said_goodbye:
            # not asked for: the agent process ended, or its machine reset the connection
            BOOK.closed(self.node_id, self.session, time.time())
        try:  # bookkeeping first: a failure of Redis below must not leave the node "connected";
            # on the heartbeat book's thread: behind the pool's backlog it would outlast daphne's
            # shutdown timeout and be killed, leaving a gone node "connected" for new placements
            await on_thread(BOOK_THREAD, registry.disconnected)(self.node_id, self.session)
        except Exception:
            log.warning("could not mark node %s disconnected", self.node_id, exc_info=True)
        if self.in_group:
            try:
                await self.channel_layer.group_discard(node_group(self.node_id), self.channel_name)
            except RedisError:
                log.warning("could not leave node %s's group (Redis)", self.node_id)

    async def handle(self, message: dict, raw: str) -> None:
        kind = message["type"]
        if kind == "hello":
            await self._hello(message)
            return
        if self.node_id is None:
            await self.refuse("the first message must be hello")
            return
        if kind == "heartbeat":
            if not self.said_goodbye:  # a beat after goodbye must not make the node look alive
                await self._heartbeat(message)
            return
        if kind == "goodbye":
            await self._goodbye(message)
            return
        if kind in inbox.STORED_KINDS:
            self._queue(Entry(message, raw))

    async def refused(self, message: Any, raw: str, reason: str) -> None:
        # behind messages still waiting to be stored, its ack would cover them: it waits its turn
        if self.reports_pending and acknowledgeable(message) is not None:
            self._queue(Entry(message, raw, reason))
        else:
            await self.reject(message, raw, reason)

    def _queue(self, entry: Entry) -> None:
        """Stored in order by one drain per connection, with whatever else arrived meanwhile;
        while the drain's batch still waits in the store's queue, a message joins that batch."""
        handover = self.handover
        if handover is not None and handover.open and not self.inbox and len(handover.entries) < MAX_BATCH:
            handover.entries.append(entry)
            return
        self.inbox.append(entry)
        if self.drainer is None or self.drainer.done():
            self.drainer = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self.inbox and self.accepting:
                batch, self.inbox = self.inbox[:MAX_BATCH], self.inbox[MAX_BATCH:]
                self.handover = Handover(self.node_id, self.sender, batch)
                try:
                    outcomes = await STORE.ask(self.handover)
                finally:
                    self.handover = None
                await self._answer(batch, outcomes)
        except Exception:  # the socket went meanwhile: the agent sends again what was not acknowledged
            log.warning("could not answer the messages of node %s", self.node_id, exc_info=True)

    async def _answer(self, batch: list[Entry], outcomes: list[inbox.Outcome]) -> None:
        """One ack for what was stored; an error (and its own ack) for each refused message."""
        upto = None
        for (message, raw, _), outcome in zip(batch, outcomes, strict=False):  # outcomes end at an outage
            if outcome.outage:
                if upto is not None:
                    await self.send_json(protocol.Ack(type="ack", upto=upto))
                self.inbox.clear()  # nothing after it may be stored before it: the agent resends them
                await self.degraded("the console cannot reach its database")
                self.accepting = False
                return
            if outcome.refusal:
                await self.reject(message, raw, outcome.refusal)  # acknowledges up to it
                upto = None
            else:
                upto = message["msg_id"]
        if upto is not None:
            await self.send_json(protocol.Ack(type="ack", upto=upto))

    async def _hello(self, hello: protocol.Hello) -> None:
        if hello.get("sent_at") is not None:  # read now, before the registry's wait for a database thread
            self.clock.observe(time.time(), float(hello["sent_at"]))
        try:
            started = await agent_db(registry.start_session)(self.token, hello)
        except registry.NodeInUse as refused:
            log.warning("refused a hello for node %s: its connection is alive and it did not present its resume secret",
                        self.token.name)
            await self.refuse(str(refused), code=protocol.CLOSE_NODE_IN_USE)
            return
        except registry.AgentRefused as refused:
            await self.refuse(str(refused))
            return
        node = started.node
        self.node_id, self.session = node.pk, node.session
        if hello.get("sent_at") is not None:  # how long it waited (the offset is its own arrival's)
            BOOK.answered_late(time.time() - float(hello["sent_at"]) - self.clock.offset)
        if started.gone:
            log.warning("node %s came back without %s: treated as lost", node.name, ", ".join(started.gone))
        BOOK.ensure_running()
        BOOK.watch(node.pk, node.session, self)
        LISTENER.ensure_listening()
        await self._join_group(announce=True)
        await self.send_json(protocol.Welcome(
            type="welcome", node_id=node.pk, heartbeat_interval=float(settings.NODE_HEARTBEAT_SECONDS),
            fence_after_seconds=registry.fence_after_seconds(), batch_limit=MAX_BATCH, resume=started.resume,
        ))
        self.want_desired()  # aside: the heartbeats behind this hello are read meanwhile

    async def _join_group(self, announce: bool = False) -> None:
        """Join the node's group (pushed desired-state changes); first tell an older connection
        of the node to close (this hello presented its resume secret, or it was no longer alive). Without Redis the node still works: its desired state is sent again
        when its heartbeats disagree with it, and it joins when Redis is back."""
        try:
            if announce:
                await self.channel_layer.group_send(
                    node_group(self.node_id), {"type": "node.superseded", "session": self.session},
                )
            await self.channel_layer.group_add(node_group(self.node_id), self.channel_name)
            self.in_group = True
        except RedisError:
            log.warning("node %s registered without Redis; it will join its group later", self.node_id)

    async def close(self, code: int | None = None, reason: str | None = None) -> None:
        self.closing = True
        await super().close(code=code, reason=reason)

    async def _goodbye(self, goodbye: protocol.Goodbye) -> None:
        """The agent is exiting cleanly: its node's jobs move on now. The connection stays open
        for the agent's last exit reports (fenced: their attempt has moved on) and their acks."""
        self.said_goodbye = True
        BOOK.forget(self.node_id, self.session)
        try:
            await agent_db(registry.said_goodbye)(self.node_id, self.session, goodbye["reason"])
        except Exception:  # the close that follows is evidence too (or the heartbeat grace)
            self.said_goodbye = False
            log.warning("could not record the goodbye of node %s", self.node_id, exc_info=True)

    async def _heartbeat(self, beat: protocol.Heartbeat) -> None:
        sent, now = beat.get("sent_at"), time.time()
        counted = now if sent is None else float(sent) + self.clock.observe(now, float(sent))
        BOOK.beat(self.node_id, self.session, counted)
        self.beats += 1
        if (not self.in_group or self.beats % REJOIN_EVERY_HEARTBEATS == 0) and (self.joining is None or self.joining.done()):
            # group membership lost with a restarted Redis comes back (group_add is idempotent);
            # aside, so that a busy Redis never holds up the heartbeats behind this one
            self.joining = asyncio.get_running_loop().create_task(self._join_group())
        # the desired state is pushed when it changes; it is sent again only when the agent's
        # report keeps disagreeing with it (a push lost in a disconnect or a Redis outage)
        running = {protocol.placement_key(r["job_id"], r["attempt"], r["role"]) for r in beat.get("running") or []}
        # while its reports wait to be stored, the node disagrees as it should (a placement it
        # saw exit is still desired until its exit report is in): no resync, which under a
        # backlog re-read every node's desired state every few beats for nothing
        agrees = running == self.sent or self.reports_pending
        self.disagreements = 0 if agrees else self.disagreements + 1
        if self.disagreements >= RESYNC_AFTER_DISAGREEMENTS:
            self.disagreements = 0
            self.want_desired()

    @property
    def reports_pending(self) -> bool:
        """Messages of this node wait to be stored (their effect on its desired state is to come)."""
        return bool(self.inbox) or (self.drainer is not None and not self.drainer.done())

    @property
    def desired_in_flight(self) -> bool:
        """A send of the desired state is asked for or under way (the heartbeat book skips it)."""
        return self.desired_sender is not None and not self.desired_sender.done()

    async def send_desired(self) -> None:
        placements = await DESIRED.ask(self.node_id)
        self.sent = frozenset(protocol.placement_key(p["job_id"], p["attempt"], p["role"]) for p in placements)
        self.disagreements = 0
        await self.send_json(protocol.Desired(type="desired", placements=placements))

    async def superseded(self) -> None:
        await self.send_json(protocol.Error(
            type="error", message=("a newer connection of this node replaced this one (it presented this session's resume "
                                   "secret, or this connection had fallen silent)"),
        ))
        await self.close(code=protocol.CLOSE_SUPERSEDED)

    def want_desired(self) -> None:
        """Send the desired state soon, off this connection's message loop: reading it waits for
        the agents' shared pool, and a heartbeat must never wait behind that pool's backlog (a
        node whose heartbeats lag past the grace is declared Lost). Asked again while a send is
        under way, it sends once more after it (the change may have come after its read)."""
        self.desired_wanted = True
        if self.desired_sender is None or self.desired_sender.done():
            self.desired_sender = asyncio.get_running_loop().create_task(self._send_wanted())

    async def _send_wanted(self) -> None:
        try:
            while self.desired_wanted:
                self.desired_wanted = False
                await self.send_desired()
        except Exception:  # the socket went, or the database: the heartbeat book sends it again
            log.warning("could not send node %s its desired state", self.node_id, exc_info=True)

    async def node_sync(self, event: dict) -> None:
        self.want_desired()

    async def node_superseded(self, event: dict) -> None:
        if event.get("session", 0) > self.session:
            await self.superseded()

    async def node_lost(self, event: dict) -> None:
        if event.get("session", self.session) < self.session:
            return  # an older session of the node was declared; this connection registered since
        await self.declared_lost()

    async def declared_lost(self) -> None:
        """The watchdog declared this node Lost while this connection was open (its heartbeats
        came too late): it must register again, or it would stay disconnected in the registry.
        Told by the watchdog's event, or by the heartbeat book (the event may be dropped)."""
        if not self.accepting or self.said_goodbye:
            return  # told already, or it is leaving anyway
        self.accepting = False
        await self.send_json(protocol.Error(
            type="error", message="the console declared this node Lost (no heartbeat arrived within the grace); connect again",
        ))
        await self.close(code=protocol.CLOSE_DECLARED_LOST)

    async def node_inject(self, event: dict) -> None:
        await self.send_json(event["message"])
