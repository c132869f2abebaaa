"""Slurm requeues a job: a spot job preempted by on-demand work, an on-demand job whose node failed.

Real preemption (preempt/partition_prio, PreemptMode=REQUEUE) and a real node failure (its slurmd
and job processes stopped with SIGSTOP until slurmctld declares the node DOWN). The console follows
Slurm's requeue: the job pauses or fails over and resumes from its newest committed checkpoint.
"""

from __future__ import annotations

import pytest

from jobs.models import JobAttempt, TrainingJob
from jobs.tests.e2e.helpers import stream_text, wait_for_status
from jobs.tests.e2e.stack import wait_until
from jobs.tests.e2e.test_failover import steps_logged

from .test_slurm_training import history, slurm_job

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

TRAIN = "PYTHONPATH=$CHECKPOINT_VENDOR torchrun train_ckpt.py --steps {steps} --every {every} --sleep 0.15"


@pytest.mark.duration(35)
def test_a_spot_job_preempted_by_an_on_demand_job_pauses_and_resumes_from_its_checkpoint(
        alice, bob, slurm_cluster, upload_script, e2e_settings):
    # it holds every GPU of both nodes; one rank per node keeps this 2-core machine responsive
    command = TRAIN.format(steps=25, every=1000).replace("torchrun", "torchrun --nproc_per_node 1")
    spot = slurm_job(alice, "slurm-spot", command, gpus=8, learning_type="spot", script_url=upload_script("train_ckpt.py"))
    wait_for_status(spot.pk, "Running", timeout=60)
    wait_until(lambda: len(steps_logged(spot.pk, "master", 1)) >= 3, timeout=60, message="three spot steps")

    # needs every GPU of both nodes too: Slurm preempts the spot job (its partition has the lower priority tier)
    urgent = slurm_job(bob, "slurm-urgent", "echo on-demand work; sleep 2", gpus=8)

    spot = wait_for_status(spot.pk, "Pending - spotinterrupted", timeout=60)
    assert spot.status_reason.startswith("Preempted by on-demand work in a higher-priority partition (Slurm PREEMPTED)")
    wait_for_status(urgent.pk, "Completed", timeout=60)
    spot = wait_for_status(spot.pk, "Completed", "Failed", timeout=120)

    assert spot.status == "Completed", spot.status_reason
    assert history(spot) == ["Pending", "Creating", "Running", "Pending - spotinterrupted", "Creating", "Running", "Completed"]
    first = steps_logged(spot.pk, "master", 1)
    resumed = JobAttempt.objects.get(job=spot, number=2)
    assert resumed.kind == "spot_resume" and resumed.slurm_run.restart_count == 1
    # the SIGTERM of the preemption made the script save its last step: nothing is redone
    assert resumed.resume_step == first[-1] > 1
    assert steps_logged(spot.pk, "master", 2)[0] == first[-1] + 1
    assert any(f"checkpoint step {first[-1]} is durable" in line for line in stream_text(spot.pk, "master"))
    assert JobAttempt.objects.get(job=spot, number=1).slurm_run.state == "PREEMPTED"
    # one stream per role across the requeue: both runs' lines are in `master`
    master = stream_text(spot.pk, "master")
    assert sum("Starting dataset initialization" in line for line in master) == 2


@pytest.mark.duration(40)
def test_a_node_failure_requeues_a_failover_job_on_a_healthy_node_and_it_completes(
        alice, slurm_cluster, idle_slurm, upload_script, e2e_settings):
    job = slurm_job(alice, "slurm-nodefail", TRAIN.format(steps=40, every=5), node_count=1, failover_enabled=True,
                    script_url=upload_script("train_ckpt.py"))
    wait_for_status(job.pk, "Running", timeout=60)
    wait_until(lambda: (TrainingJob.objects.get(pk=job.pk).checkpoint_step or 0) >= 5, timeout=60, message="checkpoint 5")
    failed = JobAttempt.objects.get(job=job, number=1).placements.get().node_name

    idle_slurm.freeze_node(failed)  # slurmd and the job's processes stop answering, as on a dead node

    job = wait_for_status(job.pk, "Pending - failoverinprogress", timeout=90)
    assert f"node {failed} failed (Slurm NODE_FAIL)" in job.status_reason
    assert "failover 1 of 3" in job.status_reason
    job = wait_for_status(job.pk, "Completed", "Failed", "Pending - maxretriesexceeded", timeout=120)
    assert job.status == "Completed", job.status_reason
    assert history(job) == ["Pending", "Creating", "Running", "Pending - failoverinprogress", "Creating", "Running", "Completed"]
    resumed = JobAttempt.objects.get(job=job, number=2)
    assert resumed.kind == "failover" and resumed.resume_step >= 5
    assert resumed.placements.get().node_name != failed
    assert JobAttempt.objects.get(job=job, number=1).slurm_run.state == "NODE_FAIL"
    assert steps_logged(job.pk, "master", 2)[0] == resumed.resume_step + 1
    assert job.failover_count == 1
