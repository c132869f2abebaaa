"""Writing a fleet's heartbeats, and the watchdog, when rows are held by other transactions.

A node row another transaction holds (the watchdog declaring the node, a hello) must hold up
neither the whole fleet's beats nor the console's proof that it listens; a watchdog that waited
behind such a lock must not declare a node whose heartbeat was written meanwhile; a connection
whose node was declared Lost is told to connect again by the book itself, as the Redis event
that says so may be dropped. Transactional: other threads hold the rows."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from jobs.channel.heartbeats import HeartbeatBook
from jobs.models import ConsoleListening, Node
from jobs.nodes import registry

from .test_nodes import make_node

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


class Told:
    """An open connection in this console process, as the heartbeat book sees it."""

    sent: frozenset[str] = frozenset()
    desired_in_flight = reports_pending = False

    def __init__(self) -> None:
        self.superseded_count = self.lost_count = 0

    async def superseded(self) -> None:
        self.superseded_count += 1

    async def declared_lost(self) -> None:
        self.lost_count += 1

    def want_desired(self) -> None:  # pragma: no cover - not part of these tests
        raise AssertionError("no desired state here")


class RowHolder(threading.Thread):
    """Holds a node's row (SELECT … FOR UPDATE) in its own transaction until released; then runs
    `before_commit` in that transaction."""

    def __init__(self, node_id: int, before_commit=lambda: None) -> None:
        super().__init__(daemon=True)
        self.node_id, self.before_commit = node_id, before_commit
        self.holding, self.release = threading.Event(), threading.Event()

    def run(self) -> None:
        try:
            with transaction.atomic():
                Node.objects.select_for_update().get(pk=self.node_id)
                self.holding.set()
                self.release.wait(30)
                self.before_commit()
        finally:
            connections.close_all()

    def __enter__(self) -> RowHolder:
        self.start()
        assert self.holding.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.join(30)


def flush(book: HeartbeatBook) -> None:
    asyncio.run(asyncio.wait_for(book.flush(), timeout=10))


def test_a_node_row_held_by_another_transaction_holds_up_neither_the_fleets_beats_nor_listening():
    held, free = make_node("gpu-01"), make_node("gpu-02")
    before = timezone.now() - timedelta(minutes=1)
    Node.objects.update(last_sent_at=before)
    book, sent = HeartbeatBook(), timezone.now()
    with RowHolder(held.pk):
        book.beat(held.pk, held.session, sent.timestamp())
        book.beat(free.pk, free.session, sent.timestamp())
        flush(book)  # before: waited for the held row, with every other node's beat
        assert Node.objects.get(pk=free.pk).last_sent_at == sent
        assert Node.objects.get(pk=held.pk).last_sent_at == before
        assert ConsoleListening.objects.get(pk=1).alive_at >= sent
    flush(book)  # the held node's beat waited for this flush
    assert Node.objects.get(pk=held.pk).last_sent_at == sent


def test_a_connection_whose_node_was_declared_lost_is_told_to_connect_again_by_the_flush():
    declared, alive = make_node("gpu-01"), make_node("gpu-02")
    Node.objects.filter(pk=declared.pk).update(lost=True, connected=False)  # its `node.lost` event was dropped
    book, told_declared, told_alive = HeartbeatBook(), Told(), Told()
    book.watch(declared.pk, declared.session, told_declared)
    book.watch(alive.pk, alive.session, told_alive)
    for node in (declared, alive):
        book.beat(node.pk, node.session, time.time())
    flush(book)
    assert (told_declared.lost_count, told_alive.lost_count) == (1, 0)
    assert told_declared.superseded_count == told_alive.superseded_count == 0


def test_a_beat_of_a_connection_a_newer_one_replaced_writes_nothing_and_closes_it():
    node = make_node("gpu-01")
    Node.objects.filter(pk=node.pk).update(session=node.session + 1)  # a new hello took over
    book, old = HeartbeatBook(), Told()
    book.watch(node.pk, node.session, old)
    book.beat(node.pk, node.session, time.time())
    flush(book)
    assert old.superseded_count == 1 and old.lost_count == 0


def _waiting_for_a_row_lock(query_start: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
            [query_start + "%"],
        )
        return cursor.fetchone()[0] > 0


def test_a_node_whose_heartbeat_is_written_while_the_watchdog_waits_for_its_row_is_not_declared_lost(settings):
    settings.NODE_LOST_AFTER_SECONDS = 30
    now = timezone.now()
    ConsoleListening.objects.update_or_create(pk=1, defaults={"alive_at": now, "listening_since": now - timedelta(hours=1)})
    node = make_node("gpu-01")
    Node.objects.filter(pk=node.pk).update(last_sent_at=now - timedelta(seconds=45), last_heartbeat_at=now)
    declared: list[list[str]] = []

    def beat_written() -> None:  # in the holder's transaction: the beat its flush wrote
        Node.objects.filter(pk=node.pk).update(last_sent_at=timezone.now())

    def watch() -> None:
        try:
            declared.append(registry.watch_heartbeats())
        finally:
            connections.close_all()

    with RowHolder(node.pk, before_commit=beat_written):
        watchdog = threading.Thread(target=watch, daemon=True)
        watchdog.start()
        deadline = time.monotonic() + 10
        while not _waiting_for_a_row_lock('UPDATE "jobs_node"') and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _waiting_for_a_row_lock('UPDATE "jobs_node"'), "the watchdog did not reach the held row"
    watchdog.join(10)
    assert declared == [[]]
    assert not Node.objects.get(pk=node.pk).lost


def test_a_flush_records_how_late_the_console_read_the_beats_it_wrote():
    slow, quick = make_node("gpu-01"), make_node("gpu-02")
    now = timezone.now()
    registry.record_heartbeats([
        registry.Beat(slow.pk, slow.session, now - timedelta(seconds=12)),  # read 12 s after it was sent
        registry.Beat(quick.pk, quick.session, now - timedelta(seconds=1)),
    ], now)
    assert ConsoleListening.objects.get(pk=1).read_lag_seconds == pytest.approx(12)
    registry.record_heartbeats([registry.Beat(quick.pk, quick.session, now)], now + timedelta(seconds=2))
    assert ConsoleListening.objects.get(pk=1).read_lag_seconds == pytest.approx(12)  # the worst of the last 10 s
    registry.record_heartbeats([registry.Beat(quick.pk, quick.session, now + timedelta(seconds=20))], now + timedelta(seconds=21))
    assert ConsoleListening.objects.get(pk=1).read_lag_seconds == pytest.approx(1)


def test_a_console_reading_heartbeats_late_gives_every_node_that_much_longer_but_still_declares_the_dead(settings):
    settings.NODE_LOST_AFTER_SECONDS, settings.NODE_WATCH_SECONDS, settings.NODE_HEARTBEAT_SECONDS = 30, 2, 5
    now = timezone.now()
    ConsoleListening.objects.update_or_create(pk=1, defaults={
        "alive_at": now, "listening_since": now - timedelta(hours=1), "read_lag_seconds": 40, "read_lag_at": now,
    })
    behind, dead = make_node("gpu-01"), make_node("gpu-02")
    # read 40 s late, a live node's newest stored beat may be a beat and those 40 s old
    Node.objects.filter(pk=behind.pk).update(last_sent_at=now - timedelta(seconds=44))
    Node.objects.filter(pk=dead.pk).update(last_sent_at=now - timedelta(seconds=55))
    assert registry.watch_heartbeats(now) == ["gpu-02"]
    ConsoleListening.objects.filter(pk=1).update(read_lag_seconds=600)  # never more than a minute more
    Node.objects.filter(pk=behind.pk).update(last_sent_at=now - timedelta(seconds=89))
    assert registry.watch_heartbeats(now) == ["gpu-01"]


def test_a_node_that_stopped_is_declared_lost_before_its_grace_is_over(settings):
    """The grace is a promise to the dead: the watchdog, running every NODE_WATCH_SECONDS,
    declares a node whose last heartbeat is grace − watch old; a live node beating every 5 s is
    never that silent (the same settings as above, the console reading 3 s late as in a drain)."""
    settings.NODE_LOST_AFTER_SECONDS, settings.NODE_WATCH_SECONDS, settings.NODE_HEARTBEAT_SECONDS = 30, 2, 5
    now = timezone.now()
    ConsoleListening.objects.update_or_create(pk=1, defaults={
        "alive_at": now, "listening_since": now - timedelta(hours=1), "read_lag_seconds": 3, "read_lag_at": now,
    })
    live, stopped = make_node("gpu-01"), make_node("gpu-02")
    Node.objects.filter(pk=live.pk).update(last_sent_at=now - timedelta(seconds=5 + 3))
    Node.objects.filter(pk=stopped.pk).update(last_sent_at=now - timedelta(seconds=28.5))
    assert registry.watch_heartbeats(now) == ["gpu-02"]
    assert not Node.objects.get(pk=live.pk).lost


def test_a_connection_that_fails_to_close_does_not_stop_the_book_telling_the_others():
    first, second = make_node("gpu-01"), make_node("gpu-02")
    Node.objects.update(lost=True, connected=False)

    class Gone(Told):
        async def declared_lost(self) -> None:
            raise ConnectionError("the socket went meanwhile")

    book, gone, other = HeartbeatBook(), Gone(), Told()
    book.watch(first.pk, first.session, gone)
    book.watch(second.pk, second.session, other)
    for node in (first, second):
        book.beat(node.pk, node.session, time.time())
    flush(book)
    assert other.lost_count == 1
