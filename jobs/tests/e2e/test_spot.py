"""Spot Training end to end: displaced by an on-demand job, paused with a durable checkpoint, resumed."""

from __future__ import annotations

import pytest

from jobs.models import JobAttempt, TrainingJob

from .helpers import create_job, stream_text, wait_for_status
from .stack import wait_until
from .test_failover import history, steps_logged

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.mark.duration(70)
def test_a_spot_job_pauses_for_an_on_demand_job_and_resumes_from_its_checkpoint(alice, bob, start_nodes, upload_script, e2e_settings):
    # a node of 2 GPUs: torchrun starts a rank per GPU, and the on-demand job needs both of them
    start_nodes("node-a", gpus="simulated:2")
    spot = create_job(alice, "cheap", "PYTHONPATH=$CHECKPOINT_VENDOR torchrun train_ckpt.py --steps 40 --every 1000 --sleep 0.1",
                      learning_type="spot", gpus_per_node=2, memory_gb=512, script_url=upload_script("train_ckpt.py"))
    wait_for_status(spot.pk, "Running", timeout=60)
    wait_until(lambda: len(steps_logged(spot.pk, "master", 1)) >= 5, timeout=60, message="five spot steps")

    # keep-alive 0: its node is not held warm for bob, so the spot job gets it back at once
    urgent = create_job(bob, "urgent", "echo on-demand work; sleep 2", gpus_per_node=2, memory_gb=512, keep_alive_minutes=0)

    spot = wait_for_status(spot.pk, "Pending - spotinterrupted", timeout=60)
    assert "capacity reclaimed by on-demand job urgent" in spot.status_reason.lower()
    wait_for_status(urgent.pk, "Completed", timeout=90)
    spot = wait_for_status(spot.pk, "Completed", "Failed", timeout=150)

    assert spot.status == "Completed", spot.status_reason
    assert history(spot) == ["Pending", "Creating", "Running", "Pending - spotinterrupted", "Creating", "Running", "Completed"]
    first = steps_logged(spot.pk, "master", 1)
    resumed = JobAttempt.objects.get(job=spot, number=2)
    assert resumed.kind == "spot_resume"
    # the checkpoint taken on SIGTERM is the last step of attempt 1: nothing is redone
    assert resumed.resume_step == first[-1]
    assert steps_logged(spot.pk, "master", 2)[0] == first[-1] + 1
    assert any(f"checkpoint step {first[-1]} is durable" in line for line in stream_text(spot.pk, "master"))
    assert TrainingJob.objects.get(pk=spot.pk).checkpoint_step >= first[-1]
