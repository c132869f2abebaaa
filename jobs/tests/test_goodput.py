"""What failed, where: an interrupted attempt records its fault (when, whose, which node); the
job page and API show the time lost per interruption and the goodput so far; staff see per
node fault counts in the admin."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import JobAttempt, Node, TrainingJob
from jobs.nodes import registry
from jobs.tasks import schedule_jobs

from .test_failover_flow import exit_report, make_node, running_job, xid

pytestmark = pytest.mark.django_db


def _failed_over(alice):
    bad, _ = make_node("gpu-01"), make_node("gpu-02")
    job = running_job(alice, bad, failover_enabled=True)
    xid(bad, 79)
    exit_report(job, bad, signal=9)
    return TrainingJob.objects.get(pk=job.pk), bad


def test_a_hardware_fault_is_the_platforms_and_dated_by_the_gpus_event(alice):
    job, bad = _failed_over(alice)
    first = JobAttempt.objects.get(job=job, number=1)
    assert first.fault_by == "platform" and first.fault_node == "gpu-01"
    assert first.fault_at is not None and first.fault_at <= first.ended_at


def test_a_users_crash_is_the_users(alice):
    node = make_node("gpu-01")
    job = running_job(alice, node, failover_enabled=True)
    exit_report(job, node, exit_code=1)
    assert JobAttempt.objects.get(job=job, number=1).fault_by == "user"


def test_a_lost_node_is_dated_by_its_last_heartbeat(alice, listening_console, settings):
    lost, _ = make_node("gpu-01"), make_node("gpu-02")
    job = running_job(alice, lost, failover_enabled=True)
    silent = timezone.now() - timedelta(seconds=settings.NODE_LOST_AFTER_SECONDS + 5)
    Node.objects.filter(pk=lost.pk).update(last_heartbeat_at=silent, last_sent_at=silent)
    registry.watch_heartbeats()
    first = JobAttempt.objects.get(job=job, number=1)
    assert first.fault_at == silent and first.fault_by == "platform"
    assert (first.ended_at - first.fault_at).total_seconds() >= settings.NODE_LOST_AFTER_SECONDS


def test_the_api_and_the_page_show_the_time_lost_and_the_goodput(alice, alice_api, alice_client, bob_api):
    job, _ = _failed_over(alice)
    schedule_jobs()  # attempt 2 placed on gpu-02

    data = alice_api.get(f"/api/v1/training-jobs/{job.pk}/").json()["goodput"]

    [loss] = data["lost"]
    assert loss["attempt"] == 1 and loss["fault_by"] == "platform" and loss["fault_node"] == "gpu-01"
    assert loss["charged_seconds"] == 0.0
    assert set(loss) >= {"detection_seconds", "rescheduling_seconds", "preparation_seconds",
                         "checkpoint_load_seconds", "steps_redone_seconds"}
    assert 0 <= data["ratio"] <= 1 and data["wall_seconds"] >= data["productive_seconds"]
    page = alice_client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="goodput"' in page and "Goodput so far" in page and 'id="time-lost"' in page
    assert bob_api.get(f"/api/v1/training-jobs/{job.pk}/").status_code == 404  # only the owner


def test_staff_see_each_nodes_fault_counts(alice, staff_client):
    _failed_over(alice)
    page = staff_client.get("/admin/jobs/node/").content.decode()
    assert "Platform faults (30 d)" in page and "User faults (30 d)" in page
    node = Node.objects.get(name="gpu-01")
    detail = staff_client.get(f"/admin/jobs/node/{node.pk}/change/").content.decode()
    assert "Platform faults (30 d)" in detail
