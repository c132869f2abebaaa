"""A cluster several users share, with real agents: warm holds are a cache, spot gives way cleanly."""

from __future__ import annotations

import pytest

from jobs.models import JobAttempt, Placement, TrainingJob
from jobs.models.attempts import HOLDING_STATES

from .helpers import create_job, wait_for_status
from .stack import wait_until
from .test_failover import history

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

LOOP = "for i in $(seq 1 {n}); do echo step $i; sleep 0.5; done"


def test_other_users_jobs_start_at_once_beside_or_in_place_of_a_warm_hold(alice, bob, alice_client, start_nodes):
    """Seen on a shared cluster: one 8-GPU node, alice's 1-GPU job completed (keep-alive 10
    minutes); bob's 1-GPU and then 8-GPU jobs waited the whole keep-alive with "0 available"."""
    start_nodes("shared-1")
    warm = create_job(alice, "alice-small", "echo done")  # keep-alive: the default 10 minutes
    wait_for_status(warm.pk, "Completed", timeout=60)

    beside = create_job(bob, "bob-small", "echo beside")
    wait_for_status(beside.pk, "Completed", timeout=60)
    alice_gpu = Placement.objects.get(attempt__job=warm).gpu_indices
    assert Placement.objects.get(attempt__job=beside).gpu_indices != alice_gpu  # a free GPU, not alice's

    whole = create_job(bob, "bob-whole", "echo whole node", gpus_per_node=8, memory_gb=2048)
    whole = wait_for_status(whole.pk, "Completed", timeout=60)
    assert Placement.objects.get(attempt__job=whole).gpu_indices == list(range(8))

    hold = Placement.objects.get(attempt__job=warm)
    assert hold.warm_released_at is not None and hold.warm_released_for == "another user's job on shared-1"
    page = alice_client.get(f"/jobs/{warm.pk}/").content.decode()
    assert "warm hold released at" in page and "for another user&#x27;s job on shared-1" in page


def test_an_on_demand_job_displaces_two_spot_jobs_which_pause_and_resume(alice, bob, start_nodes):
    """The wedge seen on a shared cluster: spot A and B (2 nodes × 4 GPUs each) on two 8-GPU
    nodes, then on-demand C (2 × 8). C must start; A and B pause, resume and complete, with no
    placement left holding GPUs and no resume interrupted at once."""
    start_nodes("shared-1", "shared-2")
    spot = dict(learning_type="spot", gpus_per_node=4, memory_gb=1024, node_count=2, keep_alive_minutes=0)
    a = create_job(alice, "spot-a", LOOP.format(n=40), **spot)
    wait_for_status(a.pk, "Running", timeout=60)
    b = create_job(alice, "spot-b", LOOP.format(n=40), **spot)
    wait_for_status(b.pk, "Running", timeout=60)

    c = create_job(bob, "urgent-c", "echo on-demand work; sleep 3", gpus_per_node=8, memory_gb=2048, node_count=2,
                   keep_alive_minutes=0)
    wait_for_status(c.pk, "Running", "Completed", timeout=60)
    for job in (a, b):
        assert "Pending - spotinterrupted" in history(TrainingJob.objects.get(pk=job.pk))
    wait_for_status(c.pk, "Completed", timeout=60)

    for job in (a, b):
        done = wait_for_status(job.pk, "Completed", "Failed", timeout=150)
        assert done.status == "Completed", done.status_reason
        assert history(done) == ["Pending", "Creating", "Running", "Pending - spotinterrupted", "Creating", "Running", "Completed"]
        # resumed once, not placed and interrupted again while C waited
        assert JobAttempt.objects.filter(job=done).count() == 2
    wait_until(lambda: not Placement.objects.filter(state__in=HOLDING_STATES).exists(), timeout=30,
               message="no placement to hold GPUs once every job ended")
