"""REST API /api/v1/: training jobs and server types, with the form's validation and messages."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from jobs import actions
from jobs.choices import JobStatus
from jobs.models import TrainingJob

from .cases import CASE_PARAMS, tag_rows
from .factories import OMIT, api_payload, form_post
from .html import field_errors

JOBS = "/api/v1/training-jobs/"


def job_url(job) -> str:
    return f"{JOBS}{job.pk}/"


def test_it_creates_a_pending_job(alice, alice_api, stored_script):
    response = alice_api.post(JOBS, api_payload(
        name="bert-base", learning_type="spot", framework="deepspeed", framework_version="0.18.9",
        server_type="g3", gpus_per_node=8, memory_gb=4096, node_count=4, shm_size_gb=1024,
        registry_username="robot", registry_password="s3cret", volume_mount_path="/mnt/data",
        script_url=stored_script, command="deepspeed train.py",
        tags=[{"key": "team", "value": "nlp"}],
    ), format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    job = TrainingJob.objects.get(owner=alice, name="bert-base")
    assert body["id"] == job.pk and body["status"] == JobStatus.PENDING
    assert body["status_reason"] == "Waiting to be scheduled"
    assert body["server_type"] == "g3" and body["memory_gb"] == 4096 and body["node_count"] == 4
    assert body["tags"] == [{"key": "team", "value": "nlp"}]
    assert body["has_registry_password"] is True and "registry_password" not in body
    assert body["hourly_price"] == "81.92"  # 32 B300 at the spot price of 2.56
    assert [(h["old_status"], h["new_status"]) for h in body["history"]] == [("", "Pending")]
    assert job.registry_password() == "s3cret"


def test_it_fills_the_defaults_the_form_shows(alice, alice_api):
    payload = {
        "name": "minimal", "server_type": "g2", "gpus_per_node": 2,
        "image_url": "ubuntu:24.04", "command": "python train.py",
    }
    response = alice_api.post(JOBS, payload, format="json")
    assert response.status_code == 201, response.json()
    job = TrainingJob.objects.get(owner=alice, name="minimal")
    assert (job.learning_type, job.framework, job.framework_version) == ("on_demand", "pytorch", "2.13.0")
    assert (job.memory_gb, job.node_count, job.shm_size_gb, job.failover_enabled) == (512, 1, 64, False)


def test_a_missing_version_takes_the_newest_of_the_framework(alice, alice_api):
    alice_api.post(JOBS, api_payload(framework="deepspeed", framework_version=OMIT), format="json")
    assert TrainingJob.objects.get(owner=alice).framework_version == "0.18.9"


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_every_validation_message_is_the_forms(alice, alice_client, alice_api, case):
    api = alice_api.post(JOBS, api_payload(**case.api), format="json")
    page = alice_client.post(reverse("jobs:create"), form_post(**case.form))
    assert api.status_code == 400
    assert api.json() == {case.field: [case.message]}
    assert field_errors(page.content) == {case.field: [case.message]}
    assert not TrainingJob.objects.filter(owner=alice).exists()


def test_it_rejects_memory_that_does_not_go_with_the_allocation(alice_api):
    response = alice_api.post(JOBS, api_payload(gpus_per_node=2, memory_gb=256), format="json")
    assert response.status_code == 400
    assert response.json() == {"memory_gb": ["2 GPU(s) on g2 come with 512 GB of memory."]}


def test_it_rejects_a_name_already_used(alice_api, make_job):
    make_job(name="llama-finetune")
    response = alice_api.post(JOBS, api_payload(name="llama-finetune"), format="json")
    assert response.status_code == 400
    assert response.json() == {"name": ["You already have a Training Job with this name."]}


def test_it_lists_the_users_jobs_newest_first(alice_api, make_job):
    make_job(name="first")
    make_job(name="second", tags=[{"key": "team", "value": "nlp"}])
    body = alice_api.get(JOBS).json()
    assert body["count"] == 2
    assert [j["name"] for j in body["results"]] == ["second", "first"]
    assert body["results"][0]["tags"] == [{"key": "team", "value": "nlp"}]


def test_it_filters_and_searches_the_list(alice_api, make_job):
    make_job(name="spot-one", learning_type="spot")
    running = make_job(name="on-demand-one", tags=[{"key": "project", "value": "vision"}])
    actions.transition(running.pk, JobStatus.CREATING, "Nodes assigned")

    def names(**params):
        return sorted(j["name"] for j in alice_api.get(JOBS, params).json()["results"])

    assert names(learning_type="spot") == ["spot-one"]
    assert names(status="Creating") == ["on-demand-one"]
    assert names(search="vision") == ["on-demand-one"]
    assert names(search="project") == ["on-demand-one"]
    assert names(search="spot") == ["spot-one"]


def test_a_wrong_filter_value_is_a_400_naming_the_parameter(alice_api, make_job):
    make_job(name="spot-one", learning_type="spot")
    response = alice_api.get(JOBS, {"learning_type": "reserved", "status": "Pending"})
    assert response.status_code == 400
    assert response.json() == {"learning_type": ["reserved is not a learning type; choose one of: on_demand, spot."]}
    # one job's URL is not filtered
    job = TrainingJob.objects.get(name="spot-one")
    assert alice_api.get(job_url(job), {"learning_type": "reserved"}).json()["name"] == "spot-one"


def test_the_schema_documents_the_list_filters_and_their_400(alice_client):
    spec = alice_client.get("/api/schema/", {"format": "json"}).json()
    listing = spec["paths"]["/api/v1/training-jobs/"]["get"]
    parameters = {p["name"]: p["schema"] for p in listing["parameters"]}
    assert sorted(parameters["status"]["enum"]) == sorted(JobStatus.values)
    assert parameters["learning_type"]["enum"] == ["on_demand", "spot"]
    assert parameters["search"]["type"] == "string"
    assert "400" in listing["responses"]


def test_it_retrieves_a_job(alice_api, make_job):
    job = make_job(registry_password="s3cret", registry_username="robot")
    body = alice_api.get(job_url(job)).json()
    assert body["name"] == job.name and body["registry_username"] == "robot"
    assert body["has_registry_password"] is True
    assert "s3cret" not in str(body)


def test_it_replaces_the_tags_with_patch(alice_api, make_job):
    job = make_job(tags=[{"key": "team", "value": "nlp"}, {"key": "old", "value": "x"}])
    response = alice_api.patch(job_url(job), {"tags": [{"key": "team", "value": "cv"}, {"key": "new", "value": ""}]}, format="json")
    assert response.status_code == 200
    assert response.json()["tags"] == [{"key": "new", "value": ""}, {"key": "team", "value": "cv"}]
    assert list(job.tags.values_list("key", "value")) == [("new", ""), ("team", "cv")]


@pytest.mark.parametrize(("tags", "message"), [
    (tag_rows(51), "Add at most 50 tags."),
    ([{"key": "a", "value": "1"}, {"key": "a", "value": "2"}], "Tag keys must be unique: 'a' appears twice."),
])
def test_it_refuses_invalid_tags_in_patch_and_keeps_the_old_ones(alice_api, make_job, tags, message):
    job = make_job(tags=[{"key": "team", "value": "nlp"}])
    response = alice_api.patch(job_url(job), {"tags": tags}, format="json")
    assert response.status_code == 400
    assert response.json() == {"tags": [message]}
    assert list(job.tags.values_list("key", "value")) == [("team", "nlp")]


@pytest.mark.parametrize("body", [{"name": "renamed"}, {"node_count": 2, "tags": []}, {"status": "Running"}])
def test_it_refuses_to_patch_anything_but_tags(alice_api, make_job, body):
    job = make_job(tags=[{"key": "team", "value": "nlp"}])
    response = alice_api.patch(job_url(job), body, format="json")
    assert response.status_code == 400
    expected = {field: ["Only tags can be changed after a Training Job is created."] for field in body if field != "tags"}
    assert response.json() == expected
    job.refresh_from_db()
    assert (job.name, job.node_count, job.status) == ("llama-finetune", 1, JobStatus.PENDING)
    assert job.tags.count() == 1


def test_put_is_not_offered(alice_api, make_job):
    job = make_job()
    assert alice_api.put(job_url(job), api_payload(), format="json").status_code == 405


def test_it_deletes_a_pending_job(alice_api, make_job):
    job = make_job()
    assert alice_api.delete(job_url(job)).status_code == 204
    assert not TrainingJob.objects.filter(pk=job.pk).exists()


def test_deleting_a_running_job_sets_it_terminating(alice_api, make_job):
    job = make_job()
    actions.transition(job.pk, JobStatus.CREATING, "Nodes assigned")
    actions.transition(job.pk, JobStatus.RUNNING, "Started")
    response = alice_api.delete(job_url(job))
    assert response.status_code == 202
    assert response.json()["status"] == JobStatus.TERMINATING
    job.refresh_from_db()
    assert job.status == JobStatus.TERMINATING
    assert job.status_changes.last().reason == "Deleted by the user"


def test_it_lists_the_server_types_of_the_catalogue(alice_api):
    body = alice_api.get("/api/v1/server-types/").json()
    types = {t["name"]: t for t in body["results"]}
    assert set(types) == {"g2", "g3"}
    g2, g3 = types["g2"], types["g3"]
    assert (g2["gpu_model"], g2["gpus_per_node"], g2["vcpus"], g2["memory_gb"]) == ("NVIDIA H100 SXM", 8, 96, 2048)
    assert (g2["infiniband_gbps"], g2["nvswitch_gbs"]) == (1600, 900)
    assert (g3["gpu_model"], g3["gpus_per_node"], g3["vcpus"], g3["memory_gb"]) == ("NVIDIA B300 SXM", 8, 128, 4096)
    assert (g3["infiniband_gbps"], g3["nvswitch_gbs"]) == (6400, 1800)
    assert g3["tflops"] == "13,500 TFLOPS FP4, 4,500 TFLOPS FP8 Tensor Core per GPU"
    assert [a["name"] for a in g3["allocations"]] == ["at.g3v16b1", "at.g3v32b2", "at.g3v64b4", "at.g3v128b8"]
    assert alice_api.get("/api/v1/server-types/g2/").json()["fp8_tflops"] == 1979


def test_a_token_from_drf_create_token_authenticates(alice, make_job):
    make_job()
    call_command("drf_create_token", "alice", stdout=open("/dev/null", "w"))  # noqa: SIM115
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get(user=alice).key}")
    response = client.get(JOBS)
    assert response.status_code == 200 and response.json()["count"] == 1


def test_a_wrong_token_is_refused(db):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    response = client.get(JOBS)
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Token"


@pytest.mark.parametrize("method", ["get", "post"])
def test_anonymous_requests_are_refused(db, make_job, method):
    job = make_job()
    client = APIClient()
    for url in [JOBS, job_url(job), "/api/v1/server-types/"]:
        response = getattr(client, method)(url, api_payload(name="anon"), format="json")
        assert response.status_code == 401, url
        assert "llama-finetune" not in response.content.decode()
    assert client.delete(job_url(job)).status_code == 401
    assert TrainingJob.objects.count() == 1


def test_session_authentication_works_for_the_browser(alice_client, make_job):
    make_job()
    response = alice_client.get(JOBS)
    assert response.status_code == 200 and response.json()["count"] == 1


def test_the_schema_and_docs_load_for_a_logged_in_user(alice_client):
    schema = alice_client.get("/api/schema/")
    assert schema.status_code == 200
    text = schema.content.decode()
    assert "/api/v1/training-jobs/" in text and "/api/v1/server-types/" in text
    spec = alice_client.get("/api/schema/", {"format": "json"}).json()
    parameters = spec["paths"]["/api/v1/training-jobs/{id}/"]["get"]["parameters"]
    assert {"name": parameters[0]["name"], "type": parameters[0]["schema"]["type"]} == {"name": "id", "type": "integer"}
    # the password is sent, never read back: only the request body declares it
    assert "registry_password" in spec["components"]["schemas"]["TrainingJobRequest"]["properties"]
    assert "registry_password" not in spec["components"]["schemas"]["TrainingJob"]["properties"]
    docs = alice_client.get("/api/docs/")
    assert docs.status_code == 200 and b"swagger" in docs.content.lower()


def test_the_schema_and_docs_need_a_login(client, db):
    assert client.get("/api/schema/").status_code in {401, 403}
    assert client.get("/api/docs/").status_code in {401, 403}


def test_it_finds_a_job_by_its_exact_name(alice_api, bob, make_job):
    make_job(name="bert")
    make_job(name="bert-large")
    make_job(name="bert", owner=bob)
    found = alice_api.get(JOBS, {"name": "bert"}).json()["results"]
    assert [(j["name"], j["id"]) for j in found] == [("bert", TrainingJob.objects.get(owner__username="alice", name="bert").pk)]
