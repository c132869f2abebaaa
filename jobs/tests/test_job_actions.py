"""The actions behind failovers, completion, checkpoints, stops, warm starts and cordons: each
stores its change, records it, and the job's open page hears of it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from jobs import actions
from jobs.choices import JobStatus
from jobs.models import Node, NodeGPU, ServerType, TrainingJob

from .ws import job_socket, session_cookie, settled

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)

FAILING_OVER = (JobStatus.CREATING, JobStatus.RUNNING, JobStatus.FAILOVER_IN_PROGRESS)


def moved(job: TrainingJob, *statuses: str) -> TrainingJob:
    for status in statuses:
        actions.transition(job.pk, status, f"now {status}")
    return TrainingJob.objects.get(pk=job.pk)


def page_hears(user, job: TrainingJob, act: Callable[[], object], count: int) -> list[dict]:
    """What the job's open page receives while `act` runs: exactly `count` events."""
    cookie = session_cookie(user)

    async def scenario():
        socket = job_socket(job.pk, cookie)
        assert (await socket.connect())[0]
        await database_sync_to_async(act)()
        events = [await socket.receive_json_from(timeout=5) for _ in range(count)]
        assert await socket.receive_nothing(timeout=0.3)
        await socket.disconnect()
        return events

    return settled(scenario)()


def last_change(job: TrainingJob) -> tuple[str, str, str]:
    change = job.status_changes.order_by("id").last()
    return change.old_status, change.new_status, change.reason


def test_a_counted_failover_is_in_the_history_and_on_the_page(alice, make_job):
    job = moved(make_job(failover_enabled=True), *FAILING_OVER)
    reason = "Reallocating to healthy nodes after Xid 79 on gpu-01 (failover 1 of 3)"

    status, fields = page_hears(alice, job, lambda: actions.count_failover(job.pk, reason), 2)

    job.refresh_from_db()
    assert (job.failover_count, job.status, job.status_reason) == (1, JobStatus.FAILOVER_IN_PROGRESS, reason)
    assert last_change(job) == (JobStatus.FAILOVER_IN_PROGRESS, JobStatus.FAILOVER_IN_PROGRESS, reason)
    assert (status["type"], status["status"], status["reason"]) == ("job.status", JobStatus.FAILOVER_IN_PROGRESS, reason)
    assert (fields["type"], fields["job_id"], fields["fields"]) == ("job.fields", job.pk, {"failover_count": 1})


def test_a_failover_with_a_new_status_moves_the_job_too(make_job):
    job = moved(make_job(failover_enabled=True), JobStatus.CREATING, JobStatus.RUNNING)
    actions.count_failover(job.pk, "Slurm requeued the job (failover 1 of 3)", JobStatus.FAILOVER_IN_PROGRESS)
    job.refresh_from_db()
    assert (job.failover_count, job.status) == (1, JobStatus.FAILOVER_IN_PROGRESS)
    assert last_change(job) == (JobStatus.RUNNING, JobStatus.FAILOVER_IN_PROGRESS, "Slurm requeued the job (failover 1 of 3)")


def test_completion_stores_where_the_results_are_and_shows_them(alice, make_job):
    job = moved(make_job(), JobStatus.CREATING, JobStatus.RUNNING)
    url = f"s3://results/jobs/{job.pk}/attempt-1/"

    status, fields = page_hears(alice, job, lambda: actions.complete_job(job.pk, "Every node's command exited with code 0", url), 2)

    job.refresh_from_db()
    assert (job.status, job.result_url) == (JobStatus.COMPLETED, url)
    assert last_change(job) == (JobStatus.RUNNING, JobStatus.COMPLETED, "Every node's command exited with code 0")
    assert status["status"] == JobStatus.COMPLETED
    assert fields["fields"] == {"result_url": url}


def test_only_a_newer_checkpoint_moves_the_jobs_newest(alice, make_job):
    job = moved(make_job(), JobStatus.CREATING, JobStatus.RUNNING)
    newer = f"s3://results/jobs/{job.pk}/checkpoints/step-20"

    def commits() -> None:
        assert actions.set_checkpoint(job.pk, 20, newer)
        assert not actions.set_checkpoint(job.pk, 10, f"s3://results/jobs/{job.pk}/checkpoints/step-10")

    [event] = page_hears(alice, job, commits, 1)

    job.refresh_from_db()
    assert (job.checkpoint_step, job.checkpoint_url) == (20, newer)
    assert event["fields"] == {"checkpoint_step": 20, "checkpoint_url": newer, "checkpoint_at": job.checkpoint_at.isoformat()}
    assert job.status_changes.count() == 3  # created, Creating, Running: a checkpoint is no status change


def test_stopping_a_waiting_job_records_it_once(alice, make_job):
    job = make_job()

    [event] = page_hears(alice, job, lambda: actions.stop_job(job.pk, "Training Workspace team-a was cancelled"), 1)

    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED
    assert last_change(job) == (JobStatus.PENDING, JobStatus.STOPPED, "Training Workspace team-a was cancelled")
    assert (event["type"], event["status"]) == ("job.status", JobStatus.STOPPED)
    assert actions.stop_job(job.pk, "again") is False
    assert job.status_changes.count() == 2


def test_a_job_that_ended_is_not_stopped(make_job):
    job = moved(make_job(), JobStatus.CREATING, JobStatus.RUNNING, JobStatus.FAILED)
    assert actions.stop_job(job.pk, "Training Workspace team-a was cancelled") is False
    assert TrainingJob.objects.get(pk=job.pk).status == JobStatus.FAILED


def test_stopping_a_running_job_starts_its_stop_grace(make_job):
    job = moved(make_job(), JobStatus.CREATING, JobStatus.RUNNING)
    attempt = job.attempts.create(number=1, master_addr="127.0.0.1", master_port=29500)
    TrainingJob.objects.filter(pk=job.pk).update(current_attempt=1)  # what start_attempts did
    assert actions.stop_job(job.pk, "Training Workspace team-a was cancelled")
    attempt.refresh_from_db()
    assert attempt.stop_requested_at is not None


def test_how_a_job_first_started_is_noted_once_and_shown(alice, make_job):
    job = make_job()

    def notes() -> None:
        actions.note_warm_starts({job.pk: (True, "reused gpu-01's prepared environment")})
        actions.note_warm_starts({job.pk: (False, "a later attempt: not noted")})

    [event] = page_hears(alice, job, notes, 1)

    job.refresh_from_db()
    assert (job.started_warm, job.warm_note) == (True, "reused gpu-01's prepared environment")
    assert event["fields"] == {"started_warm": True, "warm_note": "reused gpu-01's prepared environment"}


def test_a_waiting_reason_reaches_only_jobs_still_waiting(alice, make_job):
    waiting, moved_on = make_job(name="waiting"), make_job(name="moved-on")
    stale = {TrainingJob.objects.get(pk=waiting.pk): "Waiting for 8 free GPUs",
             TrainingJob.objects.get(pk=moved_on.pk): "Waiting for 8 free GPUs"}
    actions.transition(moved_on.pk, JobStatus.CREATING, "Attempt 1 placed on gpu-01")

    assert page_hears(alice, moved_on, lambda: actions.set_waiting_reasons(stale), 0) == []
    assert TrainingJob.objects.get(pk=moved_on.pk).status_reason == "Attempt 1 placed on gpu-01"
    assert TrainingJob.objects.get(pk=waiting.pk).status_reason == "Waiting for 8 free GPUs"


def node_with_gpus(name: str = "gpu-01") -> Node:
    node = Node.objects.create(name=name, server_type=ServerType.objects.get(name="g2"), address="127.0.0.1",
                               connected=True, last_heartbeat_at=timezone.now())
    NodeGPU.objects.bulk_create([NodeGPU(node=node, index=i, uuid=f"{name}-{i}", model="H100", memory_gb=80) for i in range(2)])
    return node


def test_a_hardware_verdict_keeps_the_reason_staff_cordoned_a_node_for():
    node = node_with_gpus()
    assert actions.set_cordon(node.pk, True, "Cordoned by staff: fan replacement")
    assert not actions.set_cordon(node.pk, True, "Xid 79 (job 3, attempt 1)", keep_reason=True)
    node.refresh_from_db()
    assert (node.cordoned, node.cordon_reason) == (True, "Cordoned by staff: fan replacement")


def test_uncordoning_a_repaired_node_makes_its_gpus_healthy_again():
    node = node_with_gpus()
    actions.set_cordon(node.pk, True, "Xid 79 (job 3, attempt 1)", keep_reason=True)
    NodeGPU.objects.filter(node=node, index=1).update(healthy=False)
    assert actions.set_cordon(node.pk, False, "ignored: an uncordoned node has no reason")
    node.refresh_from_db()
    assert (node.cordoned, node.cordon_reason) == (False, "")
    assert set(node.gpus.values_list("healthy", flat=True)) == {True}
