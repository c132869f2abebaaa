"""A job's project fields through the API and the creation form (issue 33): workdir_url, inputs
and from_checkpoint are checked as their owner, in the owner's own storage space (real
SeaweedFS), and answered with the same message on the same field by both; the job's GET shows
them (so `simpleai export` round-trips) with its read-only result_url, and its placements carry
the workdir and inputs."""

from __future__ import annotations

import hashlib

import pytest
from django.urls import reverse

from console.lib.audit import AuditAction, AuditEvent
from jobs import lifecycle
from jobs.models import TrainingJob
from jobs.nodes import desired
from jobs.scheduling.decision import Assignment
from jobs.storage.models import bucket_name

from .factories import api_client, api_payload, form_post, logged_in
from .html import field_errors
from .storage import put_in_space
from .test_nodes import make_node

JOBS = "/api/v1/training-jobs/"
URL = reverse("jobs:create")
PROJECT = b"not really a tarball, but content-addressed all the same"
SHA = hashlib.sha256(PROJECT).hexdigest()


@pytest.fixture
def project(alice, object_storage_settings, object_store) -> dict[str, str]:
    """Alice's packed project, a data folder of two files and a single file, uploaded with her keys."""
    put = lambda key, body: put_in_space(alice, object_store.endpoint, key, body)  # noqa: E731
    urls = {"workdir": put(f"workdirs/{SHA}.tar.gz", PROJECT), "vocab": put("inputs/vocab.json", b"{}")}
    put("datasets/shakespeare/train.txt", b"to be")
    put("datasets/shakespeare/val.txt", b"or not")
    urls["folder"] = f"s3://{bucket_name(alice.pk)}/datasets/shakespeare"  # no "/": found to be a folder
    return urls


def _both(user, api_body: dict, form_body: dict) -> tuple[dict, dict]:
    """The API's and the form's field errors for the same job; neither may create it."""
    answer = api_client(user).post(JOBS, api_payload(**api_body), format="json")
    page = logged_in(user).post(URL, form_post(**form_body))
    assert answer.status_code == 400 and page.status_code == 200, answer.content
    assert not TrainingJob.objects.filter(owner=user).exclude(name="source").exists()
    return answer.json(), field_errors(page.content)


def test_the_api_creates_a_job_from_a_workdir_and_inputs_without_a_script(alice, alice_api, project):
    body = api_payload(workdir_url=project["workdir"], command="python train.py",
                       inputs=[{"name": "data", "url": project["folder"]}, {"name": "VOCAB", "url": project["vocab"]}])
    created = alice_api.post(JOBS, body, format="json")
    assert created.status_code == 201, created.json()
    shown = alice_api.get(f"{JOBS}{created.json()['id']}/").json()
    assert shown["workdir_url"] == project["workdir"] and shown["script_url"] == ""
    assert shown["inputs"] == [{"name": "data", "url": project["folder"] + "/"}, {"name": "VOCAB", "url": project["vocab"]}]
    assert shown["from_checkpoint"] is None and shown["result_url"] == ""

    node = make_node("gpu-01")
    lifecycle.start_attempt(shown["id"], [Assignment(node.pk, node.name, (0,))])
    placement = desired.desired_placements(node.pk)[0]
    assert placement["workdir"] == {"url": project["workdir"], "sha256": SHA}
    assert placement["inputs"] == shown["inputs"]
    assert alice_api.get(f"{JOBS}{shown['id']}/").json()["result_url"] == (
        f"s3://{bucket_name(alice.pk)}/jobs/{shown['id']}/attempt-1/")


def test_a_placement_without_them_carries_neither(alice, make_job):
    job = make_job()
    node = make_node("gpu-01")
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])
    placement = desired.desired_placements(node.pk)[0]
    assert "workdir" not in placement and "inputs" not in placement


def test_the_form_creates_the_same_job(alice, alice_client, project):
    response = alice_client.post(URL, form_post(
        workdir_url=project["workdir"], inputs=f"data={project['folder']}\nVOCAB = {project['vocab']}\n"))
    assert response.status_code == 302, field_errors(response.content)
    job = TrainingJob.objects.get(owner=alice)
    assert job.workdir_url == project["workdir"]
    assert job.inputs == [{"name": "data", "url": project["folder"] + "/"}, {"name": "VOCAB", "url": project["vocab"]}]
    page = alice_client.get(job.get_absolute_url()).content.decode()
    assert project["workdir"] in page and f"$SIMPLEAI_INPUT_DATA</code> ← <code>{project['folder']}/" in page


def test_a_workdir_or_input_that_is_not_there_is_refused_on_its_field(alice, project):
    missing = project["workdir"].replace(SHA, "0" * 64)
    api, form = _both(alice, {"workdir_url": missing}, {"workdir_url": missing})
    message = (f"Workdir {missing} was not found in your storage: upload it first (simpleai run --workdir does) "
               "or correct the URL.")
    assert api == {"workdir_url": [message]} and form == {"workdir_url": [message]}

    nothing = f"s3://{bucket_name(alice.pk)}/datasets/nothing/"
    api, form = _both(alice, {"inputs": [{"name": "data", "url": nothing}]}, {"inputs": f"data={nothing}"})
    assert api == {"inputs": [f"Input data: There is nothing under {nothing} in your storage."]} and form == api


@pytest.mark.parametrize("persona", ["carol", "bob"])  # the teammate and the outsider alike
def test_another_users_workdir_and_inputs_are_not_in_ones_space(request, persona, project):
    other = request.getfixturevalue(persona)
    space = f"(s3://{bucket_name(other.pk)}/)"
    api, form = _both(other, {"workdir_url": project["workdir"], "inputs": [{"name": "data", "url": project["folder"]}]},
                      {"workdir_url": project["workdir"], "inputs": f"data={project['folder']}"})
    assert api == form == {
        "workdir_url": [f"{project['workdir']} is not in your storage space {space}."],
        "inputs": [f"Input data: {project['folder']} is not in your storage space {space}."],
    }
    refusals = AuditEvent.objects.filter(action=AuditAction.LOCATION_REFUSED, actor=other)
    assert sorted(refusals.values_list("target", flat=True)) == sorted([project["workdir"], project["folder"]] * 2)


def test_only_ones_own_job_with_a_checkpoint_can_be_started_from(alice, bob, make_job, object_storage_settings):
    without = make_job(name="source")
    api, form = _both(alice, {"from_checkpoint": without.pk}, {"from_checkpoint": str(without.pk)})
    assert api == form == {"from_checkpoint": [f"Job {without.pk} has no checkpoint to start from."]}
    theirs = make_job(name="source", owner=bob, checkpoint_step=10)
    api, form = _both(alice, {"from_checkpoint": theirs.pk}, {"from_checkpoint": str(theirs.pk)})
    assert api == form == {"from_checkpoint": [f"Job {theirs.pk} is not one of your jobs."]}


def test_the_form_offers_only_ones_own_jobs_with_a_checkpoint(alice, bob, alice_client, make_job):
    mine = make_job(name="with-ckpt", checkpoint_step=40)
    make_job(name="no-ckpt")
    make_job(name="bobs", owner=bob, checkpoint_step=40)
    page = alice_client.get(URL).content.decode()
    assert f'<option value="{mine.pk}">with-ckpt (job {mine.pk}, step 40)</option>' in page
    assert "no-ckpt" not in page and "bobs" not in page


def test_a_blank_image_is_accepted_and_the_export_shows_every_project_field(alice_api, project):
    created = alice_api.post(JOBS, api_payload(image_url="", workdir_url=project["workdir"]), format="json")
    assert created.status_code == 201, created.json()
    shown = alice_api.get(f"{JOBS}{created.json()['id']}/").json()
    assert shown["image_url"] == ""  # the seeded environments name no image; process nodes need none
    assert {"workdir_url", "inputs", "from_checkpoint", "result_url"} <= set(shown)
    again = alice_api.post(f"{JOBS}validate/", {**{k: shown[k] for k in api_payload()}, "name": "again",
                                                 "workdir_url": shown["workdir_url"], "inputs": shown["inputs"]}, format="json")
    assert again.status_code == 200, again.json()


def test_result_url_is_read_only(alice_api, make_job):
    job = make_job()
    answer = alice_api.post(JOBS, api_payload(name="other", result_url="s3://elsewhere/x/"), format="json")
    assert answer.status_code == 201 and answer.json()["result_url"] == ""
    assert alice_api.patch(f"{JOBS}{job.pk}/", {"result_url": "s3://x/"}, format="json").status_code == 400
