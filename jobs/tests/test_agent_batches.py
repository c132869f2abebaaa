"""The console's end of the agent protocol under load: messages that arrive while others are stored are
stored in order and answered together, and reads (desired states, hellos) do not queue behind them.
Driven through the real ASGI app and Redis."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from jobs import actions, lifecycle
from jobs.channel import consumer
from jobs.channel.notify import node_group
from jobs.models import Node, NodeToken
from jobs.scheduling.decision import Assignment
from monitoring.models import LogLine

from .agent_channel import agent_socket, connect_node, hello, hold_row, placed_job, placed_on, synced
from .factories import job_fields

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


@synced
async def test_messages_that_arrive_while_one_is_stored_are_stored_in_order_and_answered_together():
    """A busy node's messages do not each wait their own turn: those that arrived while its first
    was stored are stored next, in order, under one ack; a refused one among them costs itself."""
    socket, _ = await connect_node("gpu-01")
    job = await sync_to_async(placed_job)()
    await socket.receive_json_from(timeout=5)  # desired
    holder, release = hold_row(job.pk)  # the first report waits for it
    now = time.time()

    def report(msg_id: int, state: str) -> dict:
        return {"type": "attempt", "msg_id": msg_id, "job_id": job.pk, "attempt": 1, "role": "master", "state": state}

    def lines(msg_id: int, stream: str, seq: int) -> dict:
        return {"type": "logs", "msg_id": msg_id, "job_id": job.pk, "attempt": 1, "stream": stream,
                "lines": [[seq, now + seq, f"line {seq}"]]}

    await socket.send_json_to(report(1, "preparing"))
    await asyncio.sleep(0.5)  # being stored, behind the held row
    for message in [report(2, "running"), lines(3, "master", 1), lines(4, "worker-1", 1), lines(5, "master", 2)]:
        await socket.send_json_to(message)
    await asyncio.sleep(0.2)
    release.set()
    replies = []
    while len(replies) < 4:
        reply = await socket.receive_json_from(timeout=5)
        if reply["type"] != "desired":
            replies.append(reply)
    await sync_to_async(holder.join)()
    assert replies[0] == {"type": "ack", "upto": 1}
    assert replies[1]["type"] == "error" and replies[1]["msg_id"] == 4 and "worker-1" in replies[1]["message"]
    assert replies[2:] == [{"type": "ack", "upto": 4}, {"type": "ack", "upto": 5}]  # not one ack per message
    await sync_to_async(job.refresh_from_db)()
    assert job.status == "Running"
    stored = await sync_to_async(lambda: list(LogLine.objects.filter(job=job).order_by("seq").values_list("stream", "text")))()
    assert stored == [("master", "line 1"), ("master", "line 2")]
    await socket.disconnect()


@synced
async def test_messages_that_arrive_while_a_nodes_batch_waits_for_the_store_join_it(monkeypatch):
    """Behind a busy store, a node's `running` and lines sent just after its `preparing` are
    stored with it and answered by one ack: they do not wait for a turn of their own."""
    monkeypatch.setattr(consumer.STORE, "concurrency", 1)
    busy, _ = await connect_node("gpu-01")
    waiting, _ = await connect_node("gpu-02")
    busy_job = await sync_to_async(placed_on)("gpu-01", "busy")
    job = await sync_to_async(placed_on)("gpu-02", "waiting")
    await busy.receive_json_from(timeout=5)  # desired
    await waiting.receive_json_from(timeout=5)
    holder, release = hold_row(busy_job.pk)  # the store's one call waits behind this row
    await busy.send_json_to({"type": "attempt", "msg_id": 1, "job_id": busy_job.pk, "attempt": 1, "role": "master", "state": "preparing"})
    await asyncio.sleep(0.3)  # the store's only call is taken
    base = {"type": "attempt", "job_id": job.pk, "attempt": 1, "role": "master"}
    for message in [{**base, "msg_id": 1, "state": "preparing"}, {**base, "msg_id": 2, "state": "running"},
                    {"type": "logs", "msg_id": 3, "job_id": job.pk, "attempt": 1, "stream": "master",
                     "lines": [[1, time.time(), "step 1"]]}]:
        await waiting.send_json_to(message)
    await asyncio.sleep(0.2)
    release.set()
    assert await busy.receive_json_from(timeout=5) == {"type": "ack", "upto": 1}
    assert await waiting.receive_json_from(timeout=5) == {"type": "ack", "upto": 3}  # one ack for the three
    assert await waiting.receive_nothing(timeout=0.3)
    await sync_to_async(holder.join)()
    await sync_to_async(job.refresh_from_db)()
    assert job.status == "Running"
    for socket in (busy, waiting):
        await socket.disconnect()


@synced
async def test_a_slow_desired_state_read_does_not_hold_up_the_nodes_heartbeats(monkeypatch):
    """A console far behind on database work still hears every heartbeat: a node's desired
    state waiting for the pool (a push) must not keep its heartbeats from counting (under a
    fleet's backlog they lagged past the grace and live nodes were declared Lost)."""
    socket, welcome = await connect_node("gpu-01")
    release, reading = threading.Event(), threading.Event()
    read = consumer.DESIRED.func

    def slow_read(node_ids: list[int]):
        reading.set()
        release.wait(15)
        return read(node_ids)

    monkeypatch.setattr(consumer.DESIRED, "func", slow_read)
    await get_channel_layer().group_send(node_group(welcome["node_id"]), {"type": "node.sync"})
    assert await sync_to_async(reading.wait)(5)  # the read waits
    sent = time.time()
    await socket.send_json_to({"type": "heartbeat", "running": [], "sent_at": sent})

    def counted_from() -> float | None:
        at = Node.objects.get(pk=welcome["node_id"]).last_sent_at
        return at.timestamp() if at else None

    deadline = time.monotonic() + 6  # two heartbeat-book flushes and then some
    while time.monotonic() < deadline and (await sync_to_async(counted_from)() or 0) < sent - 0.01:
        await asyncio.sleep(0.2)
    # counted from when it was read at most (one sample of the clocks' offset includes its delay)
    assert sent - 0.01 <= (await sync_to_async(counted_from)() or 0) < sent + 1.0, "the heartbeat waited for the desired state"
    release.set()
    assert (await socket.receive_json_from(timeout=10))["type"] == "desired"
    await socket.disconnect()


@synced
async def test_a_hello_read_late_does_not_make_the_nodes_heartbeats_look_fresher():
    """A hello that waited 40 s behind a fleet reconnecting, then a heartbeat read at once and
    one read 5 s late: the late one still counts from when it was sent. (The offset measured
    from the hello alone was 40 s too large; a beat read late then counted from when it was
    read, and a killed node behind a backlog was declared Lost that much later.)"""
    behind = 100.0  # the agent's clock is 100 s behind the console's
    _, token = await sync_to_async(NodeToken.mint)("gpu-01")
    socket = agent_socket(token)
    assert (await socket.connect())[0]
    await socket.send_json_to({**hello("gpu-01"), "sent_at": time.time() - behind - 40})
    welcome = await socket.receive_json_from(timeout=5)
    assert welcome["type"] == "welcome"
    first = time.time() - behind
    await socket.send_json_to({"type": "heartbeat", "running": [], "sent_at": first})
    await asyncio.sleep(5.5)
    await socket.send_json_to({"type": "heartbeat", "running": [], "sent_at": first + 0.5})  # read 5 s late
    truth = first + 0.5 + behind

    def counted_from() -> float:
        at = Node.objects.get(pk=welcome["node_id"]).last_sent_at
        return at.timestamp() if at else 0.0

    deadline = time.monotonic() + 6  # two heartbeat-book flushes and then some
    while time.monotonic() < deadline and await sync_to_async(counted_from)() < truth - 0.5:
        await asyncio.sleep(0.2)
    counted = await sync_to_async(counted_from)()
    assert abs(counted - truth) < 1.0, f"the late beat counts from {counted - truth:+.1f} s after it was sent"
    await socket.disconnect()


@synced
async def test_a_hello_is_answered_while_more_stored_messages_wait_than_the_console_has_threads():
    """Reports stuck behind slow transactions (more than a console process has threads) take
    only the threads that store messages: a node connecting meanwhile is still welcomed."""
    stuck_nodes = [f"gpu-{n:02d}" for n in range(1, 10)]  # more than the loop's default pool (6)
    sockets = [(await connect_node(name))[0] for name in stuck_nodes]

    def place_each() -> list[int]:
        from .factories import UserFactory

        owner = UserFactory(username="alice")
        job_ids = []
        for name in stuck_nodes:
            node = Node.objects.get(name=name)
            job = actions.create_job(owner, job_fields(name=f"job-{name}"), [])
            lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])
            job_ids.append(job.pk)
        return job_ids

    job_ids = await sync_to_async(place_each)()
    holder, release = hold_row(*job_ids, seconds=20)  # slow transactions elsewhere: every report waits for them
    try:
        for socket, job_id in zip(sockets, job_ids, strict=True):
            await socket.send_json_to({"type": "attempt", "msg_id": 1, "job_id": job_id, "attempt": 1, "role": "master",
                                       "state": "preparing"})
        await asyncio.sleep(0.5)  # each report waits for its row
        _, token = await sync_to_async(NodeToken.mint)("gpu-late")
        late = agent_socket(token)
        assert (await late.connect())[0]
        await late.send_json_to(hello("gpu-late"))
        assert (await late.receive_json_from(timeout=8))["type"] == "welcome"
        await late.disconnect()
    finally:
        release.set()
        await sync_to_async(holder.join)()
    for socket in sockets:
        await socket.disconnect()
