"""Training Jobs run on a real Slurm cluster: DDP across two nodes, a failing rank, deletion, waiting.

Real daemons end to end: the console (daphne, Celery worker and beat) submits through a real
slurmrestd, slurmd runs the batch script, srun starts nodeagent.slurm_step on both nodes, and the
launchers run real PyTorch and ship their lines back over the WebSocket.
"""

from __future__ import annotations

import time

import pytest
from rest_framework.test import APIClient

from jobs import actions
from jobs.models import JobAttempt, Placement, TrainingJob
from jobs.slurm.models import SlurmJob
from jobs.tests.e2e.helpers import create_job, stream_text, wait_for_status
from jobs.tests.e2e.stack import wait_until
from jobs.tests.storage import space_client

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def slurm_job(owner, name: str, command: str, node_count: int = 2, gpus: int = 1, **extra) -> TrainingJob:
    return create_job(owner, name, command, node_count=node_count, server_type="g3", gpus_per_node=gpus,
                      memory_gb=512 * gpus, **extra)


def history(job: TrainingJob) -> list[str]:
    return list(job.status_changes.order_by("created_at", "id").values_list("new_status", flat=True))


def test_a_two_node_ddp_job_runs_through_slurm_and_completes(alice, slurm_cluster, upload_script, object_store, e2e_settings):
    started = time.time()
    command = """echo 'SIMPLEAI_METRIC {"step": 1, "loss": 0.5}'; torchrun train_ddp.py --steps 8 --sleep 0.2"""
    job = slurm_job(alice, "slurm-ddp", command, gpus=2, script_url=upload_script("train_ddp.py"))

    job = wait_for_status(job.pk, "Completed", "Failed", timeout=120)

    assert job.status == "Completed", job.status_reason
    assert history(job) == ["Pending", "Creating", "Running", "Completed"]
    master, worker = stream_text(job.pk, "master"), stream_text(job.pk, "worker-1")
    # 2 GPUs per node: torchrun starts 2 ranks on each node (PET_NPROC_PER_NODE), 4 in all
    for rank in (0, 1):
        assert any(f"rank {rank} step 8 loss" in line for line in master), master
    for rank in (2, 3):
        assert any(f"rank {rank} step 8 loss" in line for line in worker), worker
    # the launchers prepared the environment in the job's own streams, as the agents do
    assert any(f"Downloading training script {job.script_url}" in line for line in master)
    assert any("[SLURM] Slurm job" in line and "this node (n2) is rank 1" in line for line in worker)
    # each node's step ran as a Unix user of its own in Alice's group, in its own namespaces
    users = set()
    for lines in (master, worker):
        isolation = next(line for line in lines if line.startswith("[INFO] Isolation: "))
        assert f"group of tenant alice, gid {2_000_000_000 + alice.pk}" in isolation, isolation
        assert "own PID, mount and IPC namespaces" in isolation and "the step stays in the cgroup Slurm gave it" in isolation
        users.add(isolation.split()[5])
    assert len(users) == 2  # n1 and n2 share this machine: never one user for two steps
    record = SlurmJob.objects.get(job=job)
    assert record.state == "COMPLETED"
    attempt = JobAttempt.objects.get(job=job)
    assert attempt.master_addr == "127.0.0.1"  # the NodeAddr of the allocation's first host
    assert sorted(Placement.objects.filter(attempt=attempt).values_list("node_name", "role")) == [("n1", "master"), ("n2", "worker-1")]
    assert attempt.slurm_run.state == "COMPLETED" and attempt.slurm_run.exit_code == 0
    # OUTPUT_DIR went to object storage, where the job page says it is
    client, space = space_client(alice, object_store.endpoint)  # in Alice's own space, read with her keys
    assert job.result_url.startswith(f"s3://{space.bucket}/jobs/{job.pk}/")
    bucket, _, prefix = job.result_url[len("s3://"):].partition("/")
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]
    assert any(key.endswith("master/model.pt") for key in keys), keys
    # the Monitoring tab's data: each node's GPUs (simulated here) and each stream's training metrics
    api = APIClient()
    api.force_authenticate(alice)
    gpus = [(line["dimensions"]["node"], line["dimensions"]["gpu"]) for line in metric_series(api, job, "GPUUtilization", started)]
    assert {("n1", 0), ("n1", 1), ("n2", 0), ("n2", 1)} <= set(gpus), gpus
    loss = metric_series(api, job, "TrainingLoss", started)
    assert sorted(line["dimensions"]["stream"] for line in loss) == ["master", "worker-1"]


def metric_series(api, job: TrainingJob, metric: str, start: float) -> list[dict]:
    response = api.get(f"/api/v1/training-jobs/{job.pk}/metrics/", {"metric": metric, "start": start, "end": time.time() + 1, "period": 10})
    assert response.status_code == 200, response.content
    return response.json()["series"]


def test_a_failing_rank_fails_the_job_and_slurm_stops_the_other_rank(alice, slurm_cluster, idle_slurm, upload_script, e2e_settings):
    job = slurm_job(alice, "slurm-fails", "torchrun train_ddp.py --steps 400 --sleep 0.05 --fail-at 3",
                    script_url=upload_script("train_ddp.py"))

    job = wait_for_status(job.pk, "Failed", "Completed", timeout=120)

    # the first node whose command failed, classified from its evidence, then Slurm's own word
    assert job.status_reason.startswith(
        "Worker-1 on n2: the command exited with code 1 (a Python exception)"), job.status_reason
    assert "Slurm FAILED, exit code 1" in job.status_reason
    assert history(job) == ["Pending", "Creating", "Running", "Failed"]
    # srun --kill-on-bad-exit stopped rank 0 long before its 400 steps
    master = Placement.objects.get(attempt__job=job, role="master")
    assert master.state == "exited" and master.exit_code != 0
    assert not any("rank 0 step 400" in line for line in stream_text(job.pk, "master"))
    slurm_id = SlurmJob.objects.get(job=job).slurm_job_id
    wait_until(lambda: not idle_slurm.job_processes(SLURM_JOB_ID=str(slurm_id)), timeout=20, message="no process of the job left")


def test_deleting_a_running_job_cancels_it_in_slurm_and_leaves_nothing_running(alice, slurm_cluster, idle_slurm):
    job = slurm_job(alice, "slurm-delete", "echo started; sleep 300")
    wait_for_status(job.pk, "Running", timeout=60)
    slurm_id = SlurmJob.objects.get(job=job).slurm_job_id
    assert idle_slurm.job_processes(SLURM_JOB_ID=str(slurm_id))

    assert actions.delete_job(job.pk) == "terminating"
    assert TrainingJob.objects.get(pk=job.pk).status == "Terminating"

    wait_until(lambda: not TrainingJob.objects.filter(pk=job.pk).exists(), timeout=60, message="the job to be removed")
    assert idle_slurm.client().job(slurm_id).state == "CANCELLED"
    assert SlurmJob.objects.get(training_job_id=job.pk).job is None
    assert idle_slurm.job_processes(SLURM_JOB_ID=str(slurm_id)) == []


def test_a_job_slurm_cannot_place_yet_shows_slurms_reason_and_starts_when_the_nodes_free_up(alice, alice_client, slurm_cluster):
    blocker = slurm_job(alice, "slurm-blocker", "sleep 300", gpus=8)
    wait_for_status(blocker.pk, "Running", timeout=60)

    waiting = slurm_job(alice, "slurm-waits", "echo finally", node_count=1, gpus=4)

    reason = "waiting for resources: 1 node × 4 GPUs are not free yet in partition ondemand"
    job = wait_until(lambda: TrainingJob.objects.filter(pk=waiting.pk, status_reason__contains=reason).first(),
                     timeout=30, message=f"Slurm's waiting reason, not {TrainingJob.objects.get(pk=waiting.pk).status_reason!r}")
    assert job.status == "Pending"
    assert job.status_reason.startswith(f"Slurm job {SlurmJob.objects.get(job=job).slurm_job_id} on local: ")
    assert reason in alice_client.get(f"/jobs/{job.pk}/").content.decode()

    actions.delete_job(blocker.pk)
    job = wait_for_status(waiting.pk, "Completed", "Failed", timeout=60)
    assert job.status == "Completed", job.status_reason
    assert "finally" in stream_text(job.pk, "master")
