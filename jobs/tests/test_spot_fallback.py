"""Spot with a deadline, through the scheduler run: a spot job whose fallback budget ran out is
placed as on-demand (it may take a spot job's GPUs), its attempts timeline and history say why,
and its GPU-hours from then on are billed at the on-demand price."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from jobs import actions, lifecycle
from jobs.lifecycle import PlacementReport
from jobs.models import JobAttempt, JobStatusChange, TrainingJob
from jobs.nodes import hardware
from jobs.tasks import schedule_jobs
from workspaces.usage import job_bill, user_items

from .factories import job_fields
from .test_failover_flow import exit_report, make_node, running_job

pytestmark = pytest.mark.django_db

FULL = {"gpus_per_node": 8, "memory_gb": 2048}


def _interrupted(alice, bob, budget: int | None):
    """Alice's spot job (with `budget`) is interrupted on gpu-01 (reclaimed, cordoned); Bob's
    spot job holds every GPU of gpu-02, the only capacity left."""
    first, second = make_node("gpu-01"), make_node("gpu-02")
    job = running_job(alice, first, learning_type="spot", spot_fallback_after_minutes=budget, **FULL)
    other = running_job(bob, second, name="bobs-spot", learning_type="spot", **FULL)
    hardware.reclaim_from_spot(first.pk, "maintenance")
    exit_report(TrainingJob.objects.get(pk=job.pk), first, exit_code=0)  # it stopped in its grace
    return TrainingJob.objects.get(pk=job.pk), other, second


def _age_interruption(job: TrainingJob, minutes: float) -> None:
    JobStatusChange.objects.filter(job=job, new_status="Pending - spotinterrupted").update(
        created_at=timezone.now() - timedelta(minutes=minutes),
    )


def test_within_its_budget_a_spot_job_waits_for_spot_capacity(alice, bob):
    job, other, _ = _interrupted(alice, bob, budget=10)
    _age_interruption(job, 9)
    schedule_jobs()
    job.refresh_from_db()
    other.refresh_from_db()
    assert job.status == "Pending - spotinterrupted" and job.on_demand_since is None
    assert other.status == "Running"  # a spot job does not preempt another


def test_once_its_budget_ran_out_it_resumes_on_on_demand_capacity_and_says_why(alice, bob):
    job, other, second = _interrupted(alice, bob, budget=10)
    _age_interruption(job, 11)

    schedule_jobs()

    job.refresh_from_db()
    assert job.on_demand_since is not None and job.on_demand_price_per_gpu_hour == Decimal("3.1000")
    decision = job.status_changes.filter(reason__startswith="Spot capacity did not return").get()
    assert "within the fallback budget (10 minutes)" in decision.reason
    assert "billed at the on-demand price ($3.1/GPU-hour) from now on" in decision.reason
    other.refresh_from_db()
    assert other.status == "Pending - spotinterrupted"  # as for any on-demand job, Bob's spot job gives way
    assert "capacity reclaimed by on-demand job llama-finetune" in other.status_reason.lower()
    exit_report(other, second, exit_code=0)
    schedule_jobs()
    job.refresh_from_db()
    assert job.status == "Creating"
    resumed = JobAttempt.objects.get(job=job, number=job.current_attempt)
    assert resumed.kind == "fallback" and resumed.on_demand
    assert resumed.placements.get().node_name == "gpu-02"


def test_after_the_fallback_it_is_billed_on_demand_and_no_longer_preempted(alice, bob, staff, alice_client):
    job, other, second = _interrupted(alice, bob, budget=0)
    schedule_jobs()
    exit_report(TrainingJob.objects.get(pk=other.pk), second, exit_code=0)
    schedule_jobs()
    job = TrainingJob.objects.get(pk=job.pk)
    assert job.status == "Creating"
    # an on-demand job arriving now waits: the fallen-back job is not spot capacity any more
    urgent = actions.create_job(staff, job_fields(name="urgent", **FULL), [])
    schedule_jobs()
    assert TrainingJob.objects.get(pk=urgent.pk).status == "Pending"
    assert TrainingJob.objects.get(pk=job.pk).status == "Creating"

    lifecycle.record_placement(PlacementReport(job.pk, job.current_attempt, "master", "running"), second.pk)
    bill = job_bill(TrainingJob.objects.get(pk=job.pk), timezone.now() + timedelta(hours=1))
    first, fallback = bill.attempts
    assert first.price_per_gpu_hour == Decimal("1.2400") and not first.on_demand  # g2 spot
    assert fallback.price_per_gpu_hour == Decimal("3.1000") and fallback.on_demand
    plans = {item.plan for item in user_items(alice) if item.source_id == job.pk}
    assert plans == {"spot", "on_demand"}  # usage shows the fallback's hours as on-demand
    page = alice_client.get(f"/jobs/{job.pk}/").content.decode()
    assert "On on-demand capacity since" in page and "billed at $3.1000 per GPU-hour from then on" in page
    assert "(on-demand fallback)" in page


def test_the_api_refuses_a_fallback_budget_on_an_on_demand_job(alice_api):
    body = {**job_fields(name="od"), "spot_fallback_after_minutes": 5}
    response = alice_api.post("/api/v1/training-jobs/", body, format="json")
    assert response.status_code == 400
    assert response.json()["spot_fallback_after_minutes"] == ["Only a Spot Training job falls back to on-demand capacity: leave it blank for On-Demand."]
    assert not TrainingJob.objects.filter(name="od").exists()


def test_the_api_takes_and_shows_a_spot_jobs_fallback_budget(alice_api):
    body = {**job_fields(name="cheap", learning_type="spot"), "spot_fallback_after_minutes": 30}
    response = alice_api.post("/api/v1/training-jobs/", body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["spot_fallback_after_minutes"] == 30 and response.json()["on_demand_since"] is None
