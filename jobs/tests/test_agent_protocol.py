"""The console's end of the agent protocol, driven through the real ASGI app and Redis."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from jobs.models import ConsoleListening, Node, NodeToken, Placement, TrainingJob
from jobs.nodes import registry
from monitoring.models import LogLine
from nodeagent.protocol import CLOSE_BAD_TOKEN, CLOSE_DECLARED_LOST

from .agent_channel import agent_socket, connect_node, hello, placed_job, refusal, synced
from .ws import settled

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


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


def test_the_welcome_carries_no_storage_keys(object_storage_settings):
    """A node holds nothing node-wide: whoever has its token gets no key to anyone's storage."""

    @settled
    async def scenario() -> dict:
        socket, welcome = await connect_node("gpu-01")
        await socket.disconnect()
        return welcome

    welcome = scenario()
    assert "object_storage" not in welcome
    assert object_storage_settings.S3_SECRET_KEY not in str(welcome)
    assert set(welcome) == {"type", "node_id", "heartbeat_interval", "fence_after_seconds", "batch_limit", "resume"}


@synced
async def test_the_agent_is_told_what_to_run_and_reports_it_to_completion():
    socket, _ = await connect_node("gpu-01")
    job = await sync_to_async(placed_job)()
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
    job = await sync_to_async(placed_job)()
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
    job = await sync_to_async(placed_job)()
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
    job = await sync_to_async(placed_job)()
    await socket.receive_json_from(timeout=5)
    await socket.send_json_to({"type": "attempt", "msg_id": 1, "job_id": job.pk, "attempt": 1, "role": "master", "state": "exited", "exit_code": 2})
    await socket.receive_json_from(timeout=5)
    await sync_to_async(job.refresh_from_db)()
    assert job.status == "Failed"
    assert job.status_reason == "The command exited with code 2"
    placement = await sync_to_async(Placement.objects.get)(attempt__job=job)
    assert placement.state == "exited" and placement.exit_code == 2
    await socket.disconnect()


async def _running_then_reconnect(ended: bool) -> TrainingJob:
    """gpu-01 runs a job; its agent comes back (a new connection) saying what it runs and what ended."""
    socket, _ = await connect_node("gpu-01")
    job = await sync_to_async(placed_job)()
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
