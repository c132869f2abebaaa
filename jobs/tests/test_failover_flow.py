"""The console's decisions after an interruption (jobs.recovery.failover), driven through the actions."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from jobs import actions, lifecycle
from jobs.channel.writes import checkpoint_prefix
from jobs.lifecycle import PlacementReport
from jobs.models import JobAttempt, Node, NodeGPU, ServerType, TrainingJob
from jobs.nodes import desired, hardware, registry
from jobs.scheduling.decision import Assignment
from jobs.tasks import schedule_jobs

from .factories import job_fields

pytestmark = pytest.mark.django_db


def make_node(name: str) -> Node:
    node = Node.objects.create(name=name, server_type=ServerType.objects.get(name="g2"), address="127.0.0.1",
                               connected=True, last_heartbeat_at=timezone.now())
    NodeGPU.objects.bulk_create([NodeGPU(node=node, index=i, uuid=f"{name}-{i}", model="H100", memory_gb=80) for i in range(8)])
    return node


def running_job(owner, node: Node, **fields) -> TrainingJob:
    job = actions.create_job(owner, job_fields(**fields), [])
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])
    lifecycle.record_placement(PlacementReport(job.pk, 1, "master", "running"), node.pk)
    job.refresh_from_db()
    assert job.status == "Running"
    return job


def exit_report(job: TrainingJob, node: Node, **fields) -> TrainingJob:
    lifecycle.record_placement(PlacementReport(job.pk, job.current_attempt, "master", "exited", **fields), node.pk)
    job.refresh_from_db()
    return job


def xid(node: Node, number: int, gpu: int = 0) -> None:
    hardware.record_fault(node.pk, {"gpu_index": gpu, "kind": "xid", "xid": number, "detail": "", "ts": time.time()})


def test_a_hardware_fault_with_failover_reallocates_to_a_healthy_node(alice, django_capture_on_commit_callbacks):
    bad, good = make_node("gpu-01"), make_node("gpu-02")
    job = running_job(alice, bad, failover_enabled=True)
    xid(bad, 79)

    job = exit_report(job, bad, signal=9)

    assert job.status == "Pending - failoverinprogress"
    assert job.status_reason.startswith("Reallocating to healthy nodes after hardware fault: XID 79 on GPU 0")
    assert job.failover_count == 1
    bad.refresh_from_db()
    assert bad.cordoned and "XID 79" in bad.cordon_reason
    assert not bad.gpus.get(index=0).healthy
    schedule_jobs()
    job.refresh_from_db()
    attempt = JobAttempt.objects.get(job=job, number=2)
    assert job.status == "Creating" and attempt.kind == "failover"
    assert list(attempt.placements.values_list("node_name", flat=True)) == ["gpu-02"]
    assert good.pk == attempt.placements.get().node_id


def test_the_resumed_attempt_starts_from_the_committed_checkpoint(alice):
    bad, _ = make_node("gpu-01"), make_node("gpu-02")
    job = running_job(alice, bad, failover_enabled=True)
    prefix = checkpoint_prefix(job.owner_id, job.pk)
    assert lifecycle.record_checkpoint(job.pk, 1, 20, prefix + "step-20", bad.pk, "master") == "ok"
    assert lifecycle.record_checkpoint(job.pk, 1, 15, prefix + "step-15", bad.pk, "master") == "ok"
    xid(bad, 48)
    exit_report(job, bad, exit_code=1)
    schedule_jobs()
    attempt = JobAttempt.objects.get(job=job, number=2)
    assert attempt.resume_step == 20
    [placement] = desired.desired_placements(attempt.placements.get().node_id)
    assert placement["resume_step"] == 20


def test_a_checkpoint_commit_of_a_superseded_attempt_is_rejected(alice):
    bad, _ = make_node("gpu-01"), make_node("gpu-02")
    job = running_job(alice, bad, failover_enabled=True)
    xid(bad, 79)
    exit_report(job, bad, signal=9)
    schedule_jobs()
    assert lifecycle.record_checkpoint(job.pk, 1, 99, checkpoint_prefix(job.owner_id, job.pk) + "step-99", bad.pk, "master") == "stale"
    assert TrainingJob.objects.get(pk=job.pk).checkpoint_step is None


def test_without_hardware_evidence_failover_is_rejected_as_internalerror(alice):
    node = make_node("gpu-01")
    job = running_job(alice, node, failover_enabled=True)
    job = exit_report(job, node, exit_code=1, message="Traceback (most recent call last):")
    assert job.status == "Pending - internalerror"
    assert list(job.status_changes.values_list("new_status", flat=True))[-2:] == ["Pending - failoverinprogress", "Pending - internalerror"]
    assert not Node.objects.get(pk=node.pk).cordoned


def test_a_kill_without_evidence_waits_for_the_recheck(alice):
    node = make_node("gpu-01")
    job = running_job(alice, node, failover_enabled=True)
    job = exit_report(job, node, signal=9)
    assert job.status == "Pending - failoverinprogress"
    assert job.status_reason.startswith("Assessing failover feasibility: killed by SIGKILL")
    from jobs.tasks import recheck_interruption

    placement = JobAttempt.objects.get(job=job, number=1).placements.get()
    recheck_interruption(job.pk, placement.pk)  # nothing new, the node is alive
    job.refresh_from_db()
    assert job.status == "Pending - internalerror"


def test_a_kill_followed_by_evidence_fails_over(alice):
    node = make_node("gpu-01")
    job = running_job(alice, node, failover_enabled=True)
    exit_report(job, node, signal=9)
    xid(node, 79)  # the driver's report arrived a moment after the crash
    from jobs.tasks import recheck_interruption

    recheck_interruption(job.pk, JobAttempt.objects.get(job=job, number=1).placements.get().pk)
    job.refresh_from_db()
    assert job.status == "Pending - failoverinprogress" and job.failover_count == 1


def test_after_three_failovers_the_next_fault_is_maxretriesexceeded(alice):
    job = None
    for attempt in range(1, 5):
        node = make_node(f"gpu-{attempt:02d}")
        if job is None:
            job = running_job(alice, node, failover_enabled=True)
        else:
            schedule_jobs()
            lifecycle.record_placement(PlacementReport(job.pk, attempt, "master", "running"), node.pk)
        xid(node, 79)
        job = exit_report(TrainingJob.objects.get(pk=job.pk), node, signal=9)
    assert job.status == "Pending - maxretriesexceeded"
    assert job.failover_count == 3


def test_with_failover_off_a_hardware_fault_fails_the_job(alice):
    node = make_node("gpu-01")
    job = running_job(alice, node, failover_enabled=False)
    xid(node, 79)
    job = exit_report(job, node, signal=9)
    assert job.status == "Failed"
    assert job.status_reason == "Hardware fault: XID 79 on GPU 0"


def test_an_image_error_is_imagepullbackoff(alice):
    node = make_node("gpu-01")
    job = actions.create_job(alice, job_fields(failover_enabled=True), [])
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])
    job = exit_report(TrainingJob.objects.get(pk=job.pk), node, image_error=True,
                      message="authentication failed for 127.0.0.1:5055/team/minbase:1")
    assert job.status == "Pending - imagepullbackoff"
    assert job.status_reason == "authentication failed for 127.0.0.1:5055/team/minbase:1"


def test_a_lost_node_fails_an_on_demand_job_over(alice, settings, listening_console):
    lost, _ = make_node("gpu-01"), make_node("gpu-02")
    job = running_job(alice, lost, failover_enabled=True)
    silent = timezone.now() - timezone.timedelta(seconds=settings.NODE_LOST_AFTER_SECONDS + 5)
    Node.objects.filter(pk=lost.pk).update(last_heartbeat_at=silent, last_sent_at=silent)
    assert registry.watch_heartbeats() == ["gpu-01"]
    job.refresh_from_db()
    assert job.status == "Pending - failoverinprogress"
    assert "node gpu-01 stopped sending heartbeats" in job.status_reason


def test_a_spot_job_is_paused_by_a_fault_and_by_an_on_demand_job(alice, bob):
    node = make_node("gpu-01")
    spot = running_job(alice, node, learning_type="spot", gpus_per_node=8, memory_gb=2048)
    urgent = actions.create_job(bob, job_fields(name="urgent", gpus_per_node=8, memory_gb=2048), [])
    schedule_jobs()
    spot.refresh_from_db()
    urgent.refresh_from_db()
    assert spot.status == "Pending - spotinterrupted"
    assert spot.status_reason.startswith("Capacity reclaimed by on-demand job urgent; resumes from its newest checkpoint")
    assert urgent.status == "Pending"  # the spot job's GPUs are held until its process has stopped
    exit_report(spot, node, exit_code=0)
    schedule_jobs()
    urgent.refresh_from_db()
    assert urgent.status == "Creating"


def test_staff_reclaim_interrupts_spot_jobs_and_cordons_the_node(alice):
    node = make_node("gpu-01")
    spot = running_job(alice, node, learning_type="spot")
    assert hardware.reclaim_from_spot(node.pk, "maintenance") == 1
    spot.refresh_from_db()
    assert spot.status == "Pending - spotinterrupted"
    assert Node.objects.get(pk=node.pk).cordoned


def test_a_failover_keeps_the_healthy_node_at_its_rank_and_moves_only_the_failed_one(alice):
    # without partial recovery the scheduler's name order would make gpu-02 (rank 1) the new master
    master, worker, _, _ = (make_node(f"gpu-0{i}") for i in range(1, 5))
    job = actions.create_job(alice, job_fields(failover_enabled=True, node_count=2), [])
    lifecycle.start_attempt(job.pk, [Assignment(master.pk, master.name, (0,)), Assignment(worker.pk, worker.name, (0,))])
    for role, node in (("master", master), ("worker-1", worker)):
        lifecycle.record_placement(PlacementReport(job.pk, 1, role, "running"), node.pk)
    xid(master, 79)
    exit_report(TrainingJob.objects.get(pk=job.pk), master, signal=9)
    lifecycle.record_placement(PlacementReport(job.pk, 1, "worker-1", "exited", signal=15), worker.pk)

    schedule_jobs()

    attempt = JobAttempt.objects.get(job=job, number=2)
    assert dict(attempt.placements.values_list("role", "node_name")) == {"master": "gpu-03", "worker-1": "gpu-02"}
    assert attempt.master_addr == "127.0.0.1" and attempt.kind == "failover"
    [placement] = desired.desired_placements(worker.pk)
    assert placement["role"] == "worker-1" and placement["reuse_previous"] is True  # its agent may reuse attempt 1's files
