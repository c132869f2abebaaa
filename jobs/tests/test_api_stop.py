"""POST /api/v1/training-jobs/{id}/stop/: the owner stops a job that waits or runs (`simpleai cancel`)."""

from __future__ import annotations

import pytest

from jobs import actions
from jobs.choices import JobStatus
from jobs.models import TrainingJob
from jobs.tests.factories import api_client

JOBS = "/api/v1/training-jobs/"


def stop_url(job) -> str:
    return f"{JOBS}{job.pk}/stop/"


def running(job) -> TrainingJob:
    actions.transition(job.pk, JobStatus.CREATING, "Nodes assigned")
    actions.transition(job.pk, JobStatus.RUNNING, "Started")
    return job


def test_the_owner_stops_a_running_job(alice_api, make_job):
    job = running(make_job())

    response = alice_api.post(stop_url(job))

    assert response.status_code == 200, response.json()
    assert response.json()["status"] == JobStatus.STOPPED
    assert response.json()["history"][-1]["reason"] == "Stopped by the user"
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED


def test_the_owner_stops_a_waiting_job(alice_api, make_job):
    job = make_job()
    assert alice_api.post(stop_url(job)).json()["status"] == JobStatus.STOPPED


@pytest.mark.parametrize("status", [JobStatus.COMPLETED, JobStatus.FAILED])
def test_a_job_that_ended_is_a_409_that_says_so(alice_api, make_job, status):
    job = running(make_job())
    actions.transition(job.pk, status, "ended")

    response = alice_api.post(stop_url(job))

    assert response.status_code == 409
    assert response.json() == {"detail": f"This Training Job is {status}: only a job that waits or runs can be stopped."}
    assert TrainingJob.objects.get(pk=job.pk).status == status


@pytest.mark.parametrize("persona", ["carol", "bob"])
def test_a_teammate_or_an_outsider_gets_a_404_and_the_job_runs_on(request, make_job, persona):
    job = running(make_job())
    client = api_client(request.getfixturevalue(persona))

    response = client.post(stop_url(job))

    assert response.status_code == 404
    assert "llama-finetune" not in response.content.decode()
    assert TrainingJob.objects.get(pk=job.pk).status == JobStatus.RUNNING


def test_anonymous_is_refused(client, make_job):
    job = make_job()
    assert client.post(stop_url(job)).status_code in {401, 403}
    assert TrainingJob.objects.get(pk=job.pk).status == JobStatus.PENDING


def test_the_schema_declares_stop_with_its_answers(alice_client):
    spec = alice_client.get("/api/schema/", {"format": "json"}).json()
    stop = spec["paths"]["/api/v1/training-jobs/{id}/stop/"]["post"]
    assert {"200", "401", "403", "404", "409"} <= set(stop["responses"])
    assert "requestBody" not in stop
