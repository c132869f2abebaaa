"""The console's end of the agent protocol, driven through the real ASGI app and Redis."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils import timezone

from console.asgi import application
from jobs import actions, agent_consumer, lifecycle
from jobs.models import ConsoleListening, Node, NodeToken, Placement, TrainingJob
from jobs.nodes import registry
from jobs.notify import node_group
from jobs.scheduling import Assignment
from monitoring.models import LogLine
from nodeagent.protocol import CLOSE_BAD_TOKEN, CLOSE_DECLARED_LOST

from .factories import job_fields
from .ws import settled

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def synced(scenario):
    """Run an async test body in an event loop of its own (no pytest-asyncio needed)."""

    @functools.wraps(scenario)
    def test(*args, **kwargs):
        return settled(scenario)(*args, **kwargs)

    return test


def hello(name: str, gpus: int = 8) -> dict:
    return {"type": "hello", "protocol": 1, "running": [], "node": {
        "name": name, "server_type": "g2", "address": "10.0.0.5", "cpus": 96, "memory_gb": 2048,
        "runtime": "process", "agent_version": "test",
        "gpus": [{"index": i, "uuid": f"GPU-{name}-{i}", "model": "NVIDIA H100 SXM", "memory_gb": 80} for i in range(gpus)],
    }}


def agent_socket(token: str) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, "/ws/agent/", headers=[(b"authorization", f"Bearer {token}".encode())])


async def connect_node(name: str) -> tuple[WebsocketCommunicator, dict]:
    _, token = await sync_to_async(NodeToken.mint)(name)
    socket = agent_socket(token)
    connected, _ = await socket.connect()
    assert connected
    await socket.send_json_to(hello(name))
    welcome = await socket.receive_json_from(timeout=5)
    assert welcome["type"] == "welcome"
    desired = await socket.receive_json_from(timeout=5)
    assert desired["type"] == "desired"
    return socket, welcome


async def refusal(token: str) -> tuple[dict, int]:
    socket = agent_socket(token)
    await socket.connect()
    message = await socket.receive_json_from(timeout=5)
    closed = await socket.receive_output(timeout=5)
    await socket.disconnect()
    return message, closed["code"]


@synced
async def test_a_wrong_token_is_refused_with_a_readable_message():
    message, code = await refusal("sat_not-a-real-token")
    assert message == {"type": "error", "message": "the token is not known to this console"}
    assert code == CLOSE_BAD_TOKEN


@synced
async def test_a_revoked_token_is_refused():
    record, token = await sync_to_async(NodeToken.mint)("gpu-01")
    await sync_to_async(record.revoke)()
    message, code = await refusal(token)
    assert message["message"] == "the token of node 'gpu-01' was revoked"
    assert code == CLOSE_BAD_TOKEN


@synced
async def test_a_token_registers_only_its_own_node():
    _, token = await sync_to_async(NodeToken.mint)("gpu-01")
    socket = agent_socket(token)
    await socket.connect()
    await socket.send_json_to(hello("gpu-02"))
    message = await socket.receive_json_from(timeout=5)
    assert message["message"] == "this token registers node 'gpu-01', not 'gpu-02'"
    await socket.disconnect()


@synced
async def test_hello_registers_the_node_and_its_gpus():
    socket, welcome = await connect_node("gpu-01")
    node = await sync_to_async(Node.objects.get)(name="gpu-01")
    assert welcome["node_id"] == node.pk
    assert welcome["heartbeat_interval"] == settings.NODE_HEARTBEAT_SECONDS  # the console sets the pace
    assert node.connected and node.address == "10.0.0.5"
    assert await sync_to_async(node.gpus.count)() == 8
    assert await sync_to_async(node.status)() == "Ready"
    await socket.disconnect()
    await sync_to_async(node.refresh_from_db)()
    assert not node.connected


def _placed_job(owner_name: str = "alice") -> TrainingJob:
    from .factories import UserFactory

    owner = UserFactory(username=owner_name)
    job = actions.create_job(owner, job_fields(), [])
    node = Node.objects.get(name="gpu-01")
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])
    return TrainingJob.objects.get(pk=job.pk)


@synced
async def test_the_agent_is_told_what_to_run_and_reports_it_to_completion():
    socket, _ = await connect_node("gpu-01")
    job = await sync_to_async(_placed_job)()
    assert job.status == "Creating"
    desired = await socket.receive_json_from(timeout=5)
    [placement] = desired["placements"]
    assert placement["job_id"] == job.pk and placement["role"] == "master" and placement["gpu_indices"] == [0]
    assert placement["master_addr"] == "10.0.0.5" and placement["nnodes"] == 1

    for msg_id, state in enumerate(["preparing", "running"], start=1):
        await socket.send_json_to({"type": "attempt", "msg_id": msg_id, "job_id": job.pk, "attempt": 1, "role": "master", "state": state})
        assert await socket.receive_json_from(timeout=5) == {"type": "ack", "upto": msg_id}
    await sync_to_async(job.refresh_from_db)()
    assert job.status == "Running"

    await socket.send_json_to({"type": "attempt", "msg_id": 3, "job_id": job.pk, "attempt": 1, "role": "master",
                               "state": "exited", "exit_code": 0, "output_url": f"s3://simpleai-results/jobs/{job.pk}/attempt-1/master/"})
    await socket.receive_json_from(timeout=5)
    await sync_to_async(job.refresh_from_db)()
    assert job.status == "Completed"
    assert job.result_url == f"s3://simpleai-results/jobs/{job.pk}/attempt-1/"
    await socket.disconnect()


@synced
async def test_a_resent_log_batch_is_stored_once_and_acked_each_time():
    socket, _ = await connect_node("gpu-01")
    job = await sync_to_async(_placed_job)()
    await socket.receive_json_from(timeout=5)  # desired
    now = time.time()
    batch = {"type": "logs", "msg_id": 7, "job_id": job.pk, "attempt": 1, "stream": "master",
             "lines": [[i, now + i / 1000, f"line {i}"] for i in range(1, 101)]}
    for _ in range(2):  # a reconnect re-sends what was not acknowledged
        await socket.send_json_to(batch)
        assert await socket.receive_json_from(timeout=5) == {"type": "ack", "upto": 7}
    texts = await sync_to_async(list)(LogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))
    assert texts == [f"line {i}" for i in range(1, 101)]
    await socket.disconnect()


@synced
async def test_lines_and_reports_of_a_superseded_attempt_are_dropped():
    socket, _ = await connect_node("gpu-01")
    job = await sync_to_async(_placed_job)()
    await socket.receive_json_from(timeout=5)
    await socket.send_json_to({"type": "logs", "msg_id": 1, "job_id": job.pk, "attempt": 99, "stream": "master", "lines": [[1, time.time(), "ghost"]]})
    await socket.receive_json_from(timeout=5)
    await socket.send_json_to({"type": "attempt", "msg_id": 2, "job_id": job.pk, "attempt": 99, "role": "master", "state": "exited", "exit_code": 1})
    await socket.receive_json_from(timeout=5)
    assert not await sync_to_async(LogLine.objects.filter(job=job).exists)()
    await sync_to_async(job.refresh_from_db)()
    assert job.status == "Creating"
    await socket.disconnect()


@synced
async def test_a_non_zero_exit_fails_the_job_with_its_reason():
    socket, _ = await connect_node("gpu-01")
    job = await sync_to_async(_placed_job)()
    await socket.receive_json_from(timeout=5)
    await socket.send_json_to({"type": "attempt", "msg_id": 1, "job_id": job.pk, "attempt": 1, "role": "master", "state": "exited", "exit_code": 2})
    await socket.receive_json_from(timeout=5)
    await sync_to_async(job.refresh_from_db)()
    assert job.status == "Failed"
    assert job.status_reason == "No hardware fault signal: exited with code 2"
    placement = await sync_to_async(Placement.objects.get)(attempt__job=job)
    assert placement.state == "exited" and placement.exit_code == 2
    await socket.disconnect()


async def _running_then_reconnect(ended: bool) -> TrainingJob:
    """gpu-01 runs a job; its agent comes back (a new connection) saying what it runs and what ended."""
    socket, _ = await connect_node("gpu-01")
    job = await sync_to_async(_placed_job)()
    await socket.receive_json_from(timeout=5)  # desired
    await socket.send_json_to({"type": "attempt", "msg_id": 1, "job_id": job.pk, "attempt": 1, "role": "master", "state": "running"})
    await socket.receive_json_from(timeout=5)
    await socket.disconnect()
    token = await sync_to_async(lambda: NodeToken.mint("gpu-01")[1])()
    again = agent_socket(token)
    assert (await again.connect())[0]
    ref = {"job_id": job.pk, "attempt": 1, "role": "master"}
    await again.send_json_to({**hello("gpu-01"), "running": [], "ended": [ref] if ended else []})
    assert (await again.receive_json_from(timeout=5))["type"] == "welcome"
    await again.disconnect()
    return await sync_to_async(TrainingJob.objects.get)(pk=job.pk)


@synced
async def test_an_agent_back_without_a_running_placement_loses_it():
    """Its processes went with the old agent (empty work dir, or another agent replaced it)."""
    job = await _running_then_reconnect(ended=False)
    assert job.status == "Failed"
    assert "came back without this placement" in job.status_reason


@synced
async def test_a_placement_the_agent_saw_end_waits_for_its_exit_report():
    """The command ended while the console was away; the report is still in the agent's spool."""
    job = await _running_then_reconnect(ended=True)
    assert job.status == "Running"


def hold_row(job_id: int) -> tuple[threading.Thread, threading.Event]:
    """A slow transaction elsewhere: it holds the job's row until the event is set."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with transaction.atomic():
            TrainingJob.objects.select_for_update().get(pk=job_id)
            held.set()
            release.wait(10)
        connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(5)
    return holder, release


@synced
async def test_messages_that_arrive_while_one_is_stored_are_stored_in_order_and_answered_together():
    """A busy node's messages do not each wait their own turn: those that arrived while its first
    was stored are stored next, in order, under one ack; a refused one among them costs itself."""
    socket, _ = await connect_node("gpu-01")
    job = await sync_to_async(_placed_job)()
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
async def test_a_node_declared_lost_while_its_connection_is_open_is_told_to_connect_again():
    """Heartbeats that came later than the grace (a console far behind) cost the node its
    placements, not its place in the registry: its agent registers again at once."""
    socket, _ = await connect_node("gpu-01")

    def silence_past_the_grace() -> list[str]:
        now = timezone.now()
        ConsoleListening.objects.update_or_create(pk=1, defaults={"alive_at": now, "listening_since": now - timedelta(hours=1)})
        silent = now - timedelta(seconds=settings.NODE_LOST_AFTER_SECONDS + 1)
        Node.objects.filter(name="gpu-01").update(last_heartbeat_at=silent, last_sent_at=silent)
        return registry.watch_heartbeats()

    assert await sync_to_async(silence_past_the_grace)() == ["gpu-01"]
    error = await socket.receive_json_from(timeout=5)
    assert error["type"] == "error" and "declared this node Lost" in error["message"]
    assert await socket.receive_output(timeout=5) == {"type": "websocket.close", "code": CLOSE_DECLARED_LOST}


def _placed_on(node_name: str, job_name: str) -> TrainingJob:
    owner = get_user_model().objects.get_or_create(username="alice")[0]
    job = actions.create_job(owner, job_fields(name=job_name), [])
    node = Node.objects.get(name=node_name)
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])
    return TrainingJob.objects.get(pk=job.pk)


@synced
async def test_messages_that_arrive_while_a_nodes_batch_waits_for_the_store_join_it(monkeypatch):
    """Behind a busy store, a node's `running` and lines sent just after its `preparing` are
    stored with it and answered by one ack: they do not wait for a turn of their own."""
    monkeypatch.setattr(agent_consumer.STORE, "concurrency", 1)
    busy, _ = await connect_node("gpu-01")
    waiting, _ = await connect_node("gpu-02")
    busy_job = await sync_to_async(_placed_on)("gpu-01", "busy")
    job = await sync_to_async(_placed_on)("gpu-02", "waiting")
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
    read = agent_consumer.DESIRED.func

    def slow_read(node_ids: list[int]):
        reading.set()
        release.wait(15)
        return read(node_ids)

    monkeypatch.setattr(agent_consumer.DESIRED, "func", slow_read)
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
    held, release = threading.Event(), threading.Event()

    def hold_the_job_rows() -> None:  # slow transactions elsewhere: every report waits for them
        with transaction.atomic():
            list(TrainingJob.objects.select_for_update().filter(pk__in=job_ids))
            held.set()
            release.wait(20)
        connection.close()

    holder = threading.Thread(target=hold_the_job_rows)
    holder.start()
    assert held.wait(5)
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
