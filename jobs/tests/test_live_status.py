"""The owner's open job page hears every status change as a `job.status` event."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from jobs import actions
from jobs.choices import JobStatus

from .ws import job_socket, session_cookie, settled

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def test_the_owner_receives_each_transition(alice, make_job):
    job = make_job()
    cookie = session_cookie(alice)

    async def scenario():
        socket = job_socket(job.pk, cookie)
        connected, _ = await socket.connect()
        assert connected
        await database_sync_to_async(actions.transition)(job.pk, JobStatus.CREATING, "Nodes assigned")
        first = await socket.receive_json_from(timeout=5)
        await database_sync_to_async(actions.transition)(job.pk, JobStatus.RUNNING, "All processes started")
        second = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return first, second

    first, second = settled(scenario)()
    assert {k: first[k] for k in ("type", "job_id", "status", "reason")} == {
        "type": "job.status", "job_id": job.pk, "status": "Creating", "reason": "Nodes assigned",
    }
    assert first["at"]
    assert (second["status"], second["reason"]) == ("Running", "All processes started")


def test_a_socket_of_another_job_hears_nothing(alice, make_job):
    watched, other = make_job(name="watched"), make_job(name="other")
    cookie = session_cookie(alice)

    async def scenario():
        socket = job_socket(watched.pk, cookie)
        assert (await socket.connect())[0]
        await database_sync_to_async(actions.transition)(other.pk, JobStatus.CREATING, "Nodes assigned")
        await database_sync_to_async(actions.transition)(watched.pk, JobStatus.STOPPED, "Stopped by the user")
        event = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return event

    event = settled(scenario)()
    assert (event["job_id"], event["status"]) == (watched.pk, "Stopped")
