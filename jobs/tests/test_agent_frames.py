"""Batched frames on the console's side: a frame that carries several of a node's messages (a
JSON array) is handled as if each had come alone, and no acknowledgement ever covers a message
that is not stored yet. Through the real ASGI app, PostgreSQL and Redis."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from asgiref.sync import sync_to_async

from jobs.channel.consumer import MAX_BATCH
from jobs.models import RejectedAgentMessage, TrainingJob
from monitoring.models import LogLine

from .agent_channel import connect_node, hold_row, placed_job, synced

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def report(job: TrainingJob, msg_id: int, state: str) -> dict:
    return {"type": "attempt", "msg_id": msg_id, "job_id": job.pk, "attempt": 1, "role": "master", "state": state}


def lines(job: TrainingJob, msg_id: int, *texts: str) -> dict:
    now = time.time()
    return {"type": "logs", "msg_id": msg_id, "job_id": job.pk, "attempt": 1, "stream": "master",
            "lines": [[seq, now, text] for seq, text in enumerate(texts, start=1)]}


async def placed() -> tuple:
    socket, welcome = await connect_node("gpu-01")
    job = await sync_to_async(placed_job)()
    assert (await socket.receive_json_from(timeout=5))["type"] == "desired"
    return socket, welcome, job


async def replies(socket, count: int) -> list[dict]:
    got = []
    while len(got) < count:
        reply = await socket.receive_json_from(timeout=5)
        if reply["type"] != "desired":
            got.append(reply)
    return got


def stored_lines(job: TrainingJob) -> list[str]:
    return list(LogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))


@synced
async def test_the_welcome_lets_the_agent_batch_and_a_batched_frame_is_stored_under_one_ack():
    socket, welcome, job = await placed()
    assert welcome["batch_limit"] == MAX_BATCH
    await socket.send_to(text_data=json.dumps([report(job, 1, "preparing"), report(job, 2, "running"),
                                               lines(job, 3, "step 1", "step 2")]))
    assert await replies(socket, 1) == [{"type": "ack", "upto": 3}]
    assert await socket.receive_nothing(timeout=0.3)
    await sync_to_async(job.refresh_from_db)()
    assert job.status == "Running"
    assert await sync_to_async(stored_lines)(job) == ["step 1", "step 2"]
    await socket.disconnect()


@synced
async def test_a_bad_message_in_a_batched_frame_is_refused_alone_and_kept_for_staff():
    socket, _, job = await placed()
    bad = {**report(job, 2, "running"), "state": "dancing"}
    await socket.send_to(text_data=json.dumps([report(job, 1, "preparing"), bad, report(job, 3, "running"),
                                               lines(job, 4, "step 1")]))
    got = await replies(socket, 3)
    assert got[0]["type"] == "error" and got[0]["msg_id"] == 2 and "state" in got[0]["message"]
    assert got[1:] == [{"type": "ack", "upto": 2}, {"type": "ack", "upto": 4}]
    await sync_to_async(job.refresh_from_db)()
    assert job.status == "Running"
    assert await sync_to_async(stored_lines)(job) == ["step 1"]
    kept = await sync_to_async(lambda: list(RejectedAgentMessage.objects.values_list("msg_id", "body")))()
    assert len(kept) == 1 and kept[0][0] == 2
    assert json.loads(kept[0][1]) == bad  # its own text, though it came inside a frame of four
    await socket.disconnect()


@synced
@pytest.mark.parametrize("frame", [
    pytest.param(lambda job: [report(job, 1, "preparing"), ["not", "a message"], report(job, 2, "running")], id="not-an-object"),
    pytest.param(lambda job: [lines(job, i, f"line {i}") for i in range(1, MAX_BATCH + 2)], id="too-many"),
    pytest.param(lambda job: [], id="empty"),
])
async def test_a_batched_frame_that_is_not_1_to_64_messages_is_refused_whole(frame):
    """One frame must not make the console refuse, answer and keep thousands of things: it is one
    malformed message, acknowledged up to its highest msg_id (the agent drops it) and kept."""
    socket, _, job = await placed()
    sent = frame(job)
    await socket.send_to(text_data=json.dumps(sent))
    highest = max((m["msg_id"] for m in sent if isinstance(m, dict)), default=None)
    got = await replies(socket, 1 if highest is None else 2)
    assert got[0]["type"] == "error" and got[0]["message"].startswith("malformed message: a batched frame")
    assert got[1:] == ([] if highest is None else [{"type": "ack", "upto": highest}])
    assert await socket.receive_nothing(timeout=0.3)
    await sync_to_async(job.refresh_from_db)()
    assert job.status == "Creating" and await sync_to_async(stored_lines)(job) == []  # nothing of it stored
    assert await sync_to_async(RejectedAgentMessage.objects.count)() == 1
    await socket.disconnect()


@synced
async def test_a_refusal_behind_messages_still_being_stored_waits_for_them():
    """A refusal is acknowledged (the agent drops everything up to it): sent while the node's
    earlier messages still wait to be stored, that ack would cover them, and an outage then
    would lose them."""
    socket, _, job = await placed()
    holder, release = hold_row(job.pk)  # the first report waits for it
    await socket.send_json_to(report(job, 1, "preparing"))
    await asyncio.sleep(0.5)  # being stored, behind the held row
    await socket.send_json_to({**report(job, 2, "running"), "state": "dancing"})
    assert await socket.receive_nothing(timeout=0.5)  # no error, no ack while msg 1 is not stored
    release.set()
    got = await replies(socket, 3)
    await sync_to_async(holder.join)()
    assert got[0] == {"type": "ack", "upto": 1}
    assert got[1]["type"] == "error" and got[1]["msg_id"] == 2
    assert got[2] == {"type": "ack", "upto": 2}
    await socket.disconnect()
