"""Agents' `metrics` messages through the real ASGI app and Redis: stored once, acked, fanned out."""

from __future__ import annotations

import json
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from console.asgi import application
from jobs.models import NodeToken, RejectedAgentMessage
from jobs.tests.ws import job_socket, session_cookie, settled
from monitoring.models import MetricSample, MetricSeries

from .conftest import place

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def hello(name: str) -> dict:
    return {"type": "hello", "protocol": 1, "running": [], "node": {
        "name": name, "server_type": "g2", "address": "10.0.0.5", "cpus": 96, "memory_gb": 2048,
        "runtime": "process", "agent_version": "test",
        "gpus": [{"index": i, "uuid": f"GPU-{name}-{i}", "model": "NVIDIA H100 SXM", "memory_gb": 80} for i in range(2)],
    }}


async def connect_node(name: str) -> WebsocketCommunicator:
    _, token = await sync_to_async(NodeToken.mint)(name)
    socket = WebsocketCommunicator(application, "/ws/agent/", headers=[(b"authorization", f"Bearer {token}".encode())])
    assert (await socket.connect())[0]
    await socket.send_json_to(hello(name))
    assert (await socket.receive_json_from(timeout=5))["type"] == "welcome"
    assert (await socket.receive_json_from(timeout=5))["type"] == "desired"
    return socket


def test_a_batch_is_stored_once_acked_each_time_and_reaches_the_jobs_page(alice, make_job):
    job = make_job()
    cookie = session_cookie(alice)
    now = time.time()
    batch = {"type": "metrics", "msg_id": 5, "samples": [
        ["GPUUtilization", now, 97.5, {"gpu": 0, "job": job.pk}],
        ["GPUUtilization", now, 0.0, {"gpu": 1}],  # an idle GPU: the node's, not the job's
        ["TrainingLoss", now, 0.42, {"job": job.pk, "stream": "master"}],
        ["NodeCPUUtilization", now, 12.0, {}],
    ]}

    async def scenario():
        page = job_socket(job.pk, cookie)
        assert (await page.connect())[0]
        agent = await connect_node("gpu-01")
        await sync_to_async(place)(job, "gpu-01")
        assert (await agent.receive_json_from(timeout=5))["type"] == "desired"  # the placement
        for _ in range(2):  # a reconnect re-sends what was not acknowledged
            await agent.send_json_to(batch)
            assert await agent.receive_json_from(timeout=5) == {"type": "ack", "upto": 5}
        event = await page.receive_json_from(timeout=5)
        while event["type"] != "job.metrics":  # the placement's status change came first
            event = await page.receive_json_from(timeout=5)
        await agent.disconnect()
        await page.disconnect()
        return event

    event = settled(scenario)()
    assert MetricSample.objects.count() == 4
    assert set(MetricSeries.objects.values_list("metric", "job_id", "node", "gpu", "stream")) == {
        ("GPUUtilization", job.pk, "gpu-01", 0, ""), ("GPUUtilization", None, "gpu-01", 1, ""),
        ("TrainingLoss", job.pk, "gpu-01", None, "master"), ("NodeCPUUtilization", None, "gpu-01", None, ""),
    }
    assert event["type"] == "job.metrics" and event["job_id"] == job.pk
    assert sorted(s[0] for s in event["samples"]) == ["GPUUtilization", "TrainingLoss"]
    assert ["GPUUtilization", now, 97.5, {"node": "gpu-01", "gpu": 0}] in event["samples"]


def test_a_malformed_batch_is_refused_with_a_reason_acked_and_kept_for_staff():
    now = time.time()
    batch = {"type": "metrics", "msg_id": 1, "samples": [
        ["GPUTemperature", now, 41.0, {"gpu": 0}], ["GPUUtilization", now, float("nan"), {"gpu": 0}],
    ]}

    async def scenario():
        agent = await connect_node("gpu-01")
        await agent.send_to(text_data=json.dumps(batch))  # NaN: what a broken agent could send
        replies = [await agent.receive_json_from(timeout=5), await agent.receive_json_from(timeout=5)]
        await agent.disconnect()
        return replies

    error, ack = settled(scenario)()
    assert error == {"type": "error", "msg_id": 1, "message": "malformed message: a GPUUtilization sample's value must be a finite number"}
    assert ack == {"type": "ack", "upto": 1}  # the agent drops it: never re-sent
    assert not MetricSample.objects.exists()
    kept = RejectedAgentMessage.objects.get()
    assert (kept.node_name, kept.msg_type, kept.msg_id) == ("gpu-01", "metrics", 1) and "NaN" in kept.body


def test_samples_of_metrics_the_console_does_not_know_are_dropped_and_the_rest_stored():
    now = time.time()
    batch = {"type": "metrics", "msg_id": 1, "samples": [["NoSuchMetric", now, 1.0, {}], ["GPUTemperature", now, 41.0, {"gpu": 0}]]}

    async def scenario():
        agent = await connect_node("gpu-01")
        await agent.send_json_to(batch)
        ack = await agent.receive_json_from(timeout=5)
        await agent.disconnect()
        return ack

    assert settled(scenario)() == {"type": "ack", "upto": 1}
    assert list(MetricSample.objects.values_list("series__metric", "value")) == [("GPUTemperature", 41.0)]
