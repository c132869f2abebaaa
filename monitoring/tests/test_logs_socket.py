"""The Logs tab's WebSocket: backlog, then every new line once; a reconnect with the last cursor
gets exactly what it missed; refusals carry close codes the page understands."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from console.lib.sockets import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from jobs.tests.ws import browser_socket, refusal, session_cookie, settled
from monitoring import consumers
from monitoring.events import logs_group
from monitoring.models import LogLine

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def store(job_id: int, stream: str, seqs: range) -> None:
    now = datetime.now(tz=UTC)
    LogLine.objects.bulk_create([
        LogLine(job_id=job_id, stream=stream, attempt=1, seq=seq, ts=now, text=f"{stream} {seq}") for seq in seqs
    ])


async def stored_and_announced(job_id: int, stream: str, seqs: range) -> None:
    """What ingestion does: store, then tell the job's watchers (the event is only a wake-up)."""
    await sync_to_async(store)(job_id, stream, seqs)
    await get_channel_layer().group_send(logs_group(job_id), {"type": "log.lines", "stream": stream, "attempt": 1, "lines": []})


def logs_socket(job_id: int, cookie: str | None, after: str = ""):
    return browser_socket(f"/ws/jobs/{job_id}/logs/" + (f"?after={after}" if after else ""), cookie)


def keys(event: dict) -> list[tuple[str, int]]:
    return [(line["stream"], line["seq"]) for line in event["lines"]]


async def receive_until(socket, count: int) -> tuple[list[tuple[str, int]], str]:
    """Read log.append messages until `count` lines arrived; returns their keys and the last cursor."""
    got, cursor = [], ""
    while len(got) < count:
        event = await socket.receive_json_from(timeout=5)
        assert event["type"] == "log.append"
        got += keys(event)
        cursor = event["cursor"]
    return got, cursor


def test_backlog_then_new_lines_then_a_reconnect_resumes_exactly(alice, make_job):
    job = make_job()
    store(job.pk, "master", range(1, 4))
    cookie = session_cookie(alice)

    async def scenario():
        socket = logs_socket(job.pk, cookie)
        assert (await socket.connect())[0]
        backlog = await socket.receive_json_from(timeout=5)
        assert backlog["type"] == "log.backlog" and backlog["streams"] == ["master"]
        assert keys(backlog) == [("master", 1), ("master", 2), ("master", 3)]
        await stored_and_announced(job.pk, "worker-1", range(1, 3))
        await stored_and_announced(job.pk, "master", range(4, 6))
        got, cursor = await receive_until(socket, 4)
        assert sorted(got) == [("master", 4), ("master", 5), ("worker-1", 1), ("worker-1", 2)]
        await socket.disconnect()

        # stored while the page was away (no one to wake): the reconnect asks after its cursor
        await sync_to_async(store)(job.pk, "master", range(6, 9))
        again = logs_socket(job.pk, cookie, after=cursor)
        assert (await again.connect())[0]
        resumed = await again.receive_json_from(timeout=5)
        assert resumed["type"] == "log.append" and keys(resumed) == [("master", 6), ("master", 7), ("master", 8)]
        assert await again.receive_nothing(timeout=0.3)
        await again.disconnect()

    settled(scenario)()


def test_a_page_too_far_behind_starts_again_from_the_backlog(alice, make_job, monkeypatch):
    monkeypatch.setattr(consumers, "CATCH_UP_LIMIT", 5)
    job = make_job()
    store(job.pk, "master", range(1, 3))
    cookie = session_cookie(alice)

    async def scenario():
        socket = logs_socket(job.pk, cookie)
        await socket.connect()
        cursor = (await socket.receive_json_from(timeout=5))["cursor"]
        await socket.disconnect()
        await sync_to_async(store)(job.pk, "master", range(3, 10))
        again = logs_socket(job.pk, cookie, after=cursor)
        await again.connect()
        event = await again.receive_json_from(timeout=5)
        await again.disconnect()
        return event

    event = settled(scenario)()
    assert event["type"] == "log.backlog" and keys(event)[-1] == ("master", 9)


def test_many_wakeups_send_each_line_once(alice, make_job):
    job = make_job()
    cookie = session_cookie(alice)

    async def scenario():
        socket = logs_socket(job.pk, cookie)
        await socket.connect()
        await socket.receive_json_from(timeout=5)
        for start in range(1, 200, 10):
            await stored_and_announced(job.pk, "master", range(start, start + 10))
        got, _ = await receive_until(socket, 200)
        assert await socket.receive_nothing(timeout=0.3)
        await socket.disconnect()
        return got

    assert settled(scenario)() == [("master", n) for n in range(1, 201)]


def test_the_logs_socket_refuses_with_codes_the_page_understands(alice, bob, make_job):
    job = make_job()
    alice_cookie, bob_cookie = session_cookie(alice), session_cookie(bob)

    async def scenario():
        assert await refusal(logs_socket(job.pk, bob_cookie)) == CLOSE_NOT_FOUND
        assert await refusal(logs_socket(job.pk, None)) == CLOSE_UNAUTHENTICATED
        assert await refusal(logs_socket(job.pk + 1000, alice_cookie)) == CLOSE_NOT_FOUND

    settled(scenario)()
