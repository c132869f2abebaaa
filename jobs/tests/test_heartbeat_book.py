"""The heartbeat book (jobs.channel.heartbeats): a lost desired-state push is sent again, a re-send stuck
behind the message backlog holds nothing up, heartbeats are written while every agent message
thread is busy. Transactional: the book reads and writes from threads of its own."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from jobs import actions, lifecycle
from jobs.channel.db import agent_db
from jobs.channel.heartbeats import HeartbeatBook
from jobs.nodes import desired
from jobs.scheduling.decision import Assignment

from .factories import job_fields
from .test_nodes import make_node


class FakeConnection:
    """An agent's connection in this console process, as jobs.channel.heartbeats sees it; asked for its
    desired state, it reads it aside like the consumer, waiting at `gate` (a backlog in the
    message pool) first."""

    def __init__(self, node_id: int, gate: asyncio.Event | None = None) -> None:
        self.node_id, self.gate = node_id, gate
        self.sent: frozenset[str] = frozenset()
        self.resent = 0
        self.reports_pending = False
        self.sending: asyncio.Task | None = None

    @property
    def desired_in_flight(self) -> bool:
        return self.sending is not None and not self.sending.done()

    async def superseded(self) -> None:  # pragma: no cover - not part of these tests
        raise AssertionError("not superseded here")

    async def declared_lost(self) -> None:  # pragma: no cover - not part of these tests
        raise AssertionError("not declared Lost here")

    def want_desired(self) -> None:
        self.resent += 1
        self.sending = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.sent = (await sync_to_async(desired.desired_keys)([self.node_id]))[self.node_id]


def sends(book: HeartbeatBook) -> list[asyncio.Task]:
    """The sends under way (those of an earlier check's event loop are over)."""
    return [c.sending for c in book.connections.values() if isinstance(c, FakeConnection) and c.desired_in_flight]


def checks(book: HeartbeatBook, count: int) -> None:
    """`count` desired-state checks, then the sends they asked for, in one event loop."""
    async def run() -> None:
        for _ in range(count):
            await book.check_desired()
        await asyncio.gather(*sends(book))
    asyncio.run(run())


@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # the book reads from another thread
def test_a_lost_desired_state_push_is_sent_again_within_two_flushes(alice):
    node, other = make_node("gpu-01"), make_node("gpu-02")
    job = actions.create_job(alice, job_fields(), [])
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])  # the push to gpu-01 got lost
    book = HeartbeatBook()
    missed, idle = FakeConnection(node.pk), FakeConnection(other.pk)
    book.watch(node.pk, 1, missed)
    book.watch(other.pk, 1, idle)

    checks(book, 1)
    assert missed.resent == 0  # a push may still be on its way: one check is not enough
    checks(book, 1)
    assert missed.resent == 1 and missed.sent == {f"{job.pk}/1/master"}
    checks(book, 2)
    assert missed.resent == 1  # up to date now: nothing more is sent
    assert idle.resent == 0  # a node with nothing to run was told nothing new


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_node_whose_reports_wait_to_be_stored_is_not_sent_its_desired_state_again_until_they_are(alice):
    """Under a backlog every node differs from its desired state for a while (a placement it saw
    exit stays desired until its exit report is stored): re-sending them all fed the backlog."""
    node = make_node("gpu-01")
    job = actions.create_job(alice, job_fields(), [])
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])
    book, busy = HeartbeatBook(), FakeConnection(node.pk)
    busy.reports_pending = True
    book.watch(node.pk, 1, busy)
    checks(book, 4)
    assert busy.resent == 0
    busy.reports_pending = False  # stored: a difference now is a push that got lost
    checks(book, 2)
    assert busy.resent == 1 and busy.sent == {f"{job.pk}/1/master"}


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_resend_stuck_behind_the_message_backlog_neither_holds_the_book_nor_is_sent_twice(alice):
    node = make_node("gpu-01")
    job = actions.create_job(alice, job_fields(), [])
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])
    book = HeartbeatBook()

    async def scenario() -> FakeConnection:
        backlog = asyncio.Event()
        stuck = FakeConnection(node.pk, gate=backlog)
        book.watch(node.pk, 1, stuck)
        for _ in range(6):  # the book's loop goes on: each check returns while the re-send waits
            await asyncio.wait_for(book.check_desired(), timeout=10)
        assert stuck.resent == 1 and stuck.desired_in_flight  # one re-send, still waiting
        backlog.set()
        await asyncio.gather(*sends(book))
        return stuck

    stuck = asyncio.run(scenario())
    assert stuck.sent == {f"{job.pk}/1/master"} and not stuck.desired_in_flight


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_heartbeats_are_written_while_every_agent_message_thread_is_busy(alice):
    """A backlog of agent messages holds the shared pool; the book still writes (its own thread)."""
    node = make_node("gpu-01")
    node.last_sent_at = None
    node.save(update_fields=["last_sent_at"])
    book, release = HeartbeatBook(), threading.Event()
    sent = timezone.now()

    async def scenario() -> None:
        busy = [asyncio.ensure_future(agent_db(release.wait)()) for _ in range(64)]  # more than the pool has
        await asyncio.sleep(0.2)
        book.beat(node.pk, node.session, sent.timestamp())
        try:
            await asyncio.wait_for(book.flush(), timeout=20)
        finally:
            release.set()
            await asyncio.gather(*busy)

    asyncio.run(scenario())
    node.refresh_from_db()
    assert node.last_sent_at == sent
