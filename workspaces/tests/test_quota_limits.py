"""Quotas at creation (form and API, the same message) and at scheduling (the job waits)."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import ServerType
from jobs.tests.factories import api_client, api_payload, form_post
from workspaces.models import Quota
from workspaces.usage import month_start

from .factories import create_job, finish, make_node, place, ran, workspace_fields

pytestmark = pytest.mark.django_db

NON_FIELD = "non_field_errors"


def quota(user, **limits) -> Quota:
    types = limits.pop("allowed_server_types", None)
    row = Quota.objects.create(user=user, **limits)
    if types:
        row.allowed_server_types.set(ServerType.objects.filter(name__in=types))
    return row


def used_one_gpu_hour(owner) -> None:
    """A finished job of `owner` that held 1 GPU for an hour this month."""
    node = make_node("used-node")
    job = create_job(owner, name="earlier", keep_alive_minutes=0)
    attempt = place(job, node)
    # the whole hour inside this month, even in a month's first hour (it may then end a little ahead)
    end = max(timezone.now(), month_start(timezone.now(), timezone.get_current_timezone()) + timedelta(hours=1))
    ran(attempt, end - timedelta(hours=1), end)
    finish(job)


LIMITS = {
    "nodes-per-job": ({"max_nodes_per_job": 1}, {"node_count": 2}, "node_count",
                      "Your quota allows at most 1 node per job (quota: maximum nodes per job)."),
    "server-types": ({"allowed_server_types": ["g3"]}, {}, "server_type",
                     "Your quota does not allow server type g2; allowed: g3 (quota: allowed server types)."),
    "spot": ({"spot_allowed": False}, {"learning_type": "spot"}, "learning_type",
             "Your quota does not allow Spot Training (quota: Spot Training allowed)."),
    "gpus-at-once": ({"max_gpus_in_use": 4}, {"gpus_per_node": 8, "memory_gb": 2048}, NON_FIELD,
                     "This job needs 8 GPUs at once; your quota allows 4 (quota: maximum GPUs in use at once)."),
}


@pytest.mark.parametrize("case", LIMITS, ids=str)
def test_a_job_beyond_a_hard_limit_is_refused_alike_by_the_form_and_the_api(alice, alice_client, alice_api, case):
    limits, overrides, field, message = LIMITS[case]
    quota(alice, **limits)
    form = {key: str(value) for key, value in overrides.items() if key != "memory_gb"}
    page = alice_client.post("/jobs/create/", form_post(**form))
    assert page.status_code == 200
    assert html.escape(message) in page.content.decode()
    api = alice_api.post("/api/v1/training-jobs/", api_payload(**overrides), format="json")
    assert api.status_code == 400
    assert api.json()[field] == [message]


def test_concurrent_jobs_beyond_the_quota_are_refused(alice, alice_client, alice_api):
    quota(alice, max_concurrent_jobs=1)
    create_job(alice, name="waiting")
    message = "You have 1 Training Job(s) that have not ended; your quota allows 1 at once (quota: maximum concurrent jobs)."
    assert html.escape(message) in alice_client.post("/jobs/create/", form_post(name="second")).content.decode()
    assert alice_api.post("/api/v1/training-jobs/", api_payload(name="second"), format="json").json()[NON_FIELD] == [message]


def test_a_used_up_monthly_budget_refuses_new_jobs(alice, alice_client, alice_api):
    quota(alice, monthly_gpu_hour_budget=1)
    used_one_gpu_hour(alice)
    month = timezone.localtime().strftime("%Y-%m")
    message = f"Your monthly budget of 1 GPU-hours is used up: 1 used in {month} (quota: monthly GPU-hour budget)."
    assert html.escape(message) in alice_client.post("/jobs/create/", form_post(name="next")).content.decode()
    assert alice_api.post("/api/v1/training-jobs/", api_payload(name="next"), format="json").json()[NON_FIELD] == [message]


def test_a_group_quota_applies_to_every_member_and_no_one_else(team, carol, bob, alice_api):
    Quota.objects.create(group=team, spot_allowed=False)
    refused = ["Your quota does not allow Spot Training (quota: Spot Training allowed)."]
    for member in (alice_api, api_client(carol)):
        response = member.post("/api/v1/training-jobs/", api_payload(learning_type="spot"), format="json")
        assert (response.status_code, response.json()["learning_type"]) == (400, refused)
    outsider = api_client(bob).post("/api/v1/training-jobs/", api_payload(learning_type="spot"), format="json")
    assert (outsider.status_code, outsider.json()["learning_type"]) == (201, "spot")


def test_workspaces_not_allowed_are_refused_alike_by_the_form_and_the_api(alice, alice_client, alice_api):
    quota(alice, workspaces_allowed=False)
    message = "Your quota does not allow Training Workspaces (quota: Training Workspaces allowed)."
    page = alice_client.post("/workspaces/create/", {**workspace_fields(), "memory_gb": ""})
    assert html.escape(message) in page.content.decode()
    assert alice_api.post("/api/v1/workspaces/", workspace_fields(), format="json").json()[NON_FIELD] == [message]


def test_a_job_within_limits_waits_for_the_gpu_quota_then_runs(alice, run_scheduler, db):
    make_node("gpu-01"), make_node("gpu-02")
    quota(alice, max_gpus_in_use=8)
    first = create_job(alice, name="first", gpus_per_node=8, memory_gb=2048, keep_alive_minutes=0)
    second = create_job(alice, name="second", gpus_per_node=8, memory_gb=2048)
    run_scheduler()
    first.refresh_from_db(), second.refresh_from_db()
    assert first.status == "Creating"
    assert second.status == "Pending"  # a node is free: only the quota holds it
    assert second.status_reason == (
        "Waiting for your GPU quota: 8 of 8 GPUs in use, this job needs 8 (quota: maximum GPUs in use at once)"
    )
    finish(first)
    run_scheduler()
    second.refresh_from_db()
    assert second.status == "Creating"


def test_a_limit_lowered_after_creation_keeps_the_job_pending_with_its_reason(alice, run_scheduler, db):
    make_node("gpu-01"), make_node("gpu-02")
    job = create_job(alice, name="wide", node_count=2)
    quota(alice, max_nodes_per_job=1)
    run_scheduler()
    job.refresh_from_db()
    assert job.status == "Pending"
    assert job.status_reason == "Waiting: Your quota allows at most 1 node per job (quota: maximum nodes per job)."


def test_running_jobs_beyond_a_lowered_concurrent_quota_wait(alice, run_scheduler, db):
    make_node("gpu-01")
    first, second = create_job(alice, name="first"), create_job(alice, name="second")
    quota(alice, max_concurrent_jobs=1)
    run_scheduler()
    first.refresh_from_db(), second.refresh_from_db()
    assert first.status == "Creating"
    assert second.status_reason == "Waiting for your job quota: 1 of 1 jobs run now (quota: maximum concurrent jobs)"


def test_a_budget_used_up_after_creation_keeps_the_job_pending(alice, run_scheduler, db):
    make_node("gpu-01")
    job = create_job(alice, name="later")
    quota(alice, monthly_gpu_hour_budget=1)
    used_one_gpu_hour(alice)
    run_scheduler()
    job.refresh_from_db()
    assert job.status == "Pending" and job.status_reason.startswith("Waiting: Your monthly budget of 1 GPU-hours is used up")


def test_jobs_in_a_workspace_do_not_count_for_the_gpu_quota(alice, run_scheduler, db):
    from .factories import make_workspace

    make_node("gpu-01"), make_node("gpu-02")
    quota(alice, max_gpus_in_use=8)
    ws = make_workspace(alice, node_count=1)
    create_job(alice, name="shared", gpus_per_node=8, memory_gb=2048)
    inside = create_job(alice, name="inside", workspace=ws, gpus_per_node=8, memory_gb=2048)
    run_scheduler()
    inside.refresh_from_db()
    assert inside.status == "Creating"
