"""The job list is live: its socket (/ws/jobs/) hears every status change of the user's own
jobs, their creation and deletion, and the rows it fetches again show the current state."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.urls import reverse

from console.lib.sockets import CLOSE_UNAUTHENTICATED
from jobs import actions
from jobs.choices import JobStatus

from .factories import job_fields
from .ws import browser_socket, refusal, session_cookie, settled

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def list_socket(cookie: str | None) -> WebsocketCommunicator:
    return browser_socket("/ws/jobs/", cookie)


def test_the_list_hears_its_users_jobs_come_change_and_go(alice, bob):
    cookie = session_cookie(alice)

    async def scenario():
        socket = list_socket(cookie)
        assert (await socket.connect())[0]
        bobs = await database_sync_to_async(actions.create_job)(bob, job_fields(name="bobs-run"), [])
        job = await database_sync_to_async(actions.create_job)(alice, job_fields(name="alices-run"), [])
        created = await socket.receive_json_from(timeout=5)
        await database_sync_to_async(actions.transition)(bobs.pk, JobStatus.CREATING, "Bob's nodes")
        await database_sync_to_async(actions.transition)(job.pk, JobStatus.CREATING, "Attempt 1 placed on gpu-01")
        changed = await socket.receive_json_from(timeout=5)
        await database_sync_to_async(actions.delete_job)(job.pk)  # holds nodes: Terminating first
        terminating = await socket.receive_json_from(timeout=5)
        assert await socket.receive_nothing(timeout=0.3)  # nothing of Bob's
        await socket.disconnect()
        return job, [created, changed, terminating]

    job, events = settled(scenario)()
    assert [(e["type"], e["job_id"], e["status"], e["reason"]) for e in events] == [
        ("job.status", job.pk, "Pending", "Waiting to be scheduled"),
        ("job.status", job.pk, "Creating", "Attempt 1 placed on gpu-01"),
        ("job.status", job.pk, "Terminating", "Deleted by the user"),
    ]


def test_a_removed_job_is_announced_as_deleted(alice, make_job):
    job = make_job()
    cookie = session_cookie(alice)

    async def scenario():
        socket = list_socket(cookie)
        assert (await socket.connect())[0]
        await database_sync_to_async(actions.delete_job)(job.pk)
        event = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return event

    event = settled(scenario)()
    assert (event["job_id"], event["status"]) == (job.pk, "Deleted")


def test_without_a_session_the_list_socket_is_refused():
    assert settled(refusal)(list_socket(None)) == CLOSE_UNAUTHENTICATED


def test_the_rows_are_the_filtered_page_with_status_and_reason(alice_client, bob, make_job):
    running = make_job(name="running-one")
    actions.transition(running.pk, JobStatus.CREATING, "Attempt 1 placed on gpu-01; preparing the environment")
    make_job(name="waiting-one")
    make_job(owner=bob, name="bobs-run")

    html = alice_client.get(reverse("jobs:list_rows")).content.decode()
    assert html.count("<tr ") == 2 and "bobs-run" not in html
    assert "Attempt 1 placed on gpu-01; preparing the environment" in html
    filtered = alice_client.get(reverse("jobs:list_rows"), {"status": "Creating"}).content.decode()
    assert "running-one" in filtered and "waiting-one" not in filtered
    assert "<html" not in filtered  # rows only, for the page to put in its table


@pytest.mark.parametrize("count", [3, 30])
def test_the_rows_make_the_same_queries_for_3_and_30_jobs(alice_client, make_job, django_assert_num_queries, count):
    for i in range(count):
        make_job(name=f"run-{i}", tags=[{"key": "team", "value": "nlp"}])
    alice_client.get(reverse("jobs:list_rows"))
    with django_assert_num_queries(5):  # session, user, count, page of jobs, their tags
        alice_client.get(reverse("jobs:list_rows"))


def test_the_status_filter_reads_like_the_badge(alice_client):
    html = alice_client.get(reverse("jobs:list")).content.decode()
    assert '<option value="Pending - spotinterrupted">Pending - spotinterrupted</option>' in html
    assert "Spot Interrupted" not in html and "Failover In Progress" not in html


def test_a_waiting_jobs_new_reason_reaches_its_page_and_the_list_without_a_history_row(alice, make_job):
    from jobs import actions
    from jobs.models import TrainingJob

    from .ws import job_socket

    def set_reason(text: str) -> int:
        return actions.set_waiting_reasons({TrainingJob.objects.get(pk=job.pk): text})

    job = make_job()
    cookie = session_cookie(alice)
    waiting = "Waiting for 1 × g2 node with 1 free GPU; 0 available"

    async def scenario():
        page, listing = job_socket(job.pk, cookie), list_socket(cookie)
        assert (await page.connect())[0] and (await listing.connect())[0]
        await database_sync_to_async(set_reason)(waiting)
        events = [await page.receive_json_from(timeout=5), await listing.receive_json_from(timeout=5)]
        assert await database_sync_to_async(set_reason)(waiting) == 0  # unchanged: no event
        assert await listing.receive_nothing(timeout=0.3)
        await page.disconnect()
        await listing.disconnect()
        return events

    events = settled(scenario)()
    assert [(e["type"], e["job_id"], e["status"], e["reason"]) for e in events] == [("job.reason", job.pk, "Pending", waiting)] * 2
    assert job.status_changes.count() == 1  # only "Created"
