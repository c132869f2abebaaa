"""Who may take a node's place on the agent channel: not whoever holds its token.

A hello with the node's token while its agent's connection is alive is refused (4423) and
changes nothing: the real agent's placements keep running and its desired state reaches only
it. The same agent process, back after a blip, presents its session's resume secret and takes
over; a new agent process is accepted once the old connection is gone (closed, or silent past
the grace). Driven through the real ASGI app, database and Redis.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.utils import timezone

from jobs.channel.notify import node_group
from jobs.models import Node, NodeToken, Placement, TrainingJob
from nodeagent.protocol import CLOSE_NODE_IN_USE, CLOSE_SUPERSEDED

from .agent_channel import agent_socket, hello, placed_job, synced

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


async def say_hello(token: str, **fields) -> tuple[WebsocketCommunicator, dict]:
    """Connect with `token`, say hello for gpu-01 (plus `fields`); return the socket and the answer."""
    socket = agent_socket(token)
    assert (await socket.connect())[0]
    await socket.send_json_to({**hello("gpu-01"), **fields})
    return socket, await socket.receive_json_from(timeout=5)


async def running_agent() -> tuple[str, WebsocketCommunicator, dict, TrainingJob]:
    """gpu-01's agent, connected, running a job it reported as running."""
    _, token = await sync_to_async(NodeToken.mint)("gpu-01")
    socket, welcome = await say_hello(token)
    assert welcome["type"] == "welcome"
    assert (await socket.receive_json_from(timeout=5))["type"] == "desired"
    job = await sync_to_async(placed_job)()
    assert (await socket.receive_json_from(timeout=5))["placements"]  # pushed: the job's placement
    await socket.send_json_to({"type": "attempt", "msg_id": 1, "job_id": job.pk, "attempt": 1, "role": "master", "state": "running"})
    assert await socket.receive_json_from(timeout=5) == {"type": "ack", "upto": 1}
    return token, socket, welcome, job


def _state(job_id: int) -> tuple[str, str, int, str, int, bool]:
    job = TrainingJob.objects.get(pk=job_id)
    placement = Placement.objects.get(attempt__job_id=job_id)
    node = Node.objects.get(name="gpu-01")
    return job.status, placement.state, node.session, node.address, node.gpus.count(), node.connected


@pytest.mark.parametrize("resume", [None, "a-guessed-secret"], ids=["no-secret", "a-wrong-secret"])
@synced
async def test_a_hello_with_the_token_while_the_agent_is_alive_is_refused_and_changes_nothing(resume):
    token, real, welcome, job = await running_agent()
    before = await sync_to_async(_state)(job.pk)
    assert before[:2] == ("Running", "running")

    # whoever holds the token says the node runs nothing, from elsewhere, with one GPU
    forged = {"running": [], "node": {**hello("gpu-01", gpus=1)["node"], "address": "203.0.113.9"}}
    impostor, answer = await say_hello(token, **forged, **({"resume": resume} if resume else {}))
    assert answer["type"] == "error" and "connected over another connection whose agent is alive" in answer["message"]
    assert await impostor.receive_output(timeout=5) == {"type": "websocket.close", "code": CLOSE_NODE_IN_USE}

    assert await sync_to_async(_state)(job.pk) == before  # nothing forgotten, nothing re-registered
    assert await real.receive_nothing(timeout=0.5)  # the real agent was not told to go
    # and the node's desired state still goes to the real agent
    await get_channel_layer().group_send(node_group(welcome["node_id"]), {"type": "node.sync"})
    desired = await real.receive_json_from(timeout=5)
    assert [p["job_id"] for p in desired["placements"]] == [job.pk]
    await real.disconnect()


@synced
async def test_the_agent_back_with_its_resume_secret_takes_its_node_over():
    """A blip: the agent reconnects before the console noticed its old connection went."""
    token, old, welcome, job = await running_agent()
    ref = {"job_id": job.pk, "attempt": 1, "role": "master"}
    new, again = await say_hello(token, running=[ref], resume=welcome["resume"])
    assert again["type"] == "welcome" and again["resume"] != welcome["resume"]  # each session its own
    error = await old.receive_json_from(timeout=5)
    assert "replaced this one" in error["message"]
    assert await old.receive_output(timeout=5) == {"type": "websocket.close", "code": CLOSE_SUPERSEDED}
    status, placement, *_ = await sync_to_async(_state)(job.pk)
    assert (status, placement) == ("Running", "running")

    # the old session's secret no longer takes the node
    stale, answer = await say_hello(token, running=[], resume=welcome["resume"])
    assert answer["type"] == "error"
    assert await stale.receive_output(timeout=5) == {"type": "websocket.close", "code": CLOSE_NODE_IN_USE}
    await new.disconnect()


@synced
async def test_a_new_agent_process_is_accepted_once_the_old_connection_closed():
    """The agent restarted: its processes went with it, so what it no longer runs is lost."""
    token, old, _, job = await running_agent()
    await old.disconnect()
    new, answer = await say_hello(token, running=[])
    assert answer["type"] == "welcome"
    status, placement, *_, connected = await sync_to_async(_state)(job.pk)
    assert placement == "lost" and status == "Failed" and connected
    await new.disconnect()


@synced
async def test_a_new_agent_process_is_accepted_once_the_old_connection_fell_silent_past_the_grace():
    """A restart after a silent network cut: the console never saw the old connection close."""
    token, old, _, job = await running_agent()
    silent = timezone.now() - timedelta(seconds=settings.NODE_LOST_AFTER_SECONDS + 1)
    await sync_to_async(Node.objects.filter(name="gpu-01").update)(last_heartbeat_at=silent, last_sent_at=silent)
    new, answer = await say_hello(token, running=[])
    assert answer["type"] == "welcome"
    assert "replaced this one" in (await old.receive_json_from(timeout=5))["message"]
    assert await old.receive_output(timeout=5) == {"type": "websocket.close", "code": CLOSE_SUPERSEDED}
    await new.disconnect()
