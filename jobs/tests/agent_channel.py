"""The agent channel's tests' helpers: an agent's socket through the real ASGI app, its hello,
a node connected and told what to run, and jobs placed on it."""

from __future__ import annotations

import functools
import threading

from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.db import connection, transaction

from console.asgi import application
from jobs import actions, lifecycle
from jobs.models import Node, NodeToken, TrainingJob
from jobs.scheduling.decision import Assignment

from .factories import job_fields
from .ws import settled


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


def placed_job(owner_name: str = "alice") -> TrainingJob:
    from .factories import UserFactory

    owner = UserFactory(username=owner_name)
    job = actions.create_job(owner, job_fields(), [])
    node = Node.objects.get(name="gpu-01")
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])
    return TrainingJob.objects.get(pk=job.pk)


def placed_on(node_name: str, job_name: str) -> TrainingJob:
    owner = get_user_model().objects.get_or_create(username="alice")[0]
    job = actions.create_job(owner, job_fields(name=job_name), [])
    node = Node.objects.get(name=node_name)
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])
    return TrainingJob.objects.get(pk=job.pk)


def hold_row(*job_ids: int, seconds: float = 10) -> tuple[threading.Thread, threading.Event]:
    """A slow transaction elsewhere: it holds the jobs' rows until the event is set (at most `seconds`)."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with transaction.atomic():
            list(TrainingJob.objects.select_for_update().filter(pk__in=job_ids))
            held.set()
            release.wait(seconds)
        connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(5)
    return holder, release
