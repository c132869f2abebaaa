"""Spot with a deadline end to end: a spot job whose capacity is reclaimed, with a fallback
budget of 0 minutes, resumes at once on on-demand capacity (here: taking the GPU another user's
spot job held), and its attempts say so."""

from __future__ import annotations

import pytest

from jobs.models import JobAttempt, Node, TrainingJob
from jobs.nodes import hardware

from .helpers import create_job, stream_text, wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def _node_of(job: TrainingJob) -> str:
    return JobAttempt.objects.get(job=job, number=job.current_attempt).placements.get().node_name


@pytest.mark.duration(30)
def test_a_reclaimed_spot_job_past_its_budget_resumes_on_on_demand_capacity(alice, bob, start_nodes, e2e_settings):
    start_nodes("node-a", "node-b", gpus="simulated:1")
    mine = create_job(alice, "deadline", "sleep 120", learning_type="spot", spot_fallback_after_minutes=0,
                      keep_alive_minutes=0)
    mine = wait_for_status(mine.pk, "Running", timeout=60)
    theirs = create_job(bob, "patient", "sleep 120", learning_type="spot", keep_alive_minutes=0)
    theirs = wait_for_status(theirs.pk, "Running", timeout=60)
    reclaimed = _node_of(mine)

    hardware.reclaim_from_spot(Node.objects.get(name=reclaimed).pk, "the provider reclaimed it")

    mine = wait_for_status(mine.pk, "Running", timeout=60)
    resumed = JobAttempt.objects.get(job=mine, number=mine.current_attempt)
    assert resumed.number == 2 and resumed.kind == "fallback" and resumed.on_demand
    assert _node_of(mine) != reclaimed
    assert mine.on_demand_since is not None
    assert TrainingJob.objects.get(pk=theirs.pk).status == "Pending - spotinterrupted"  # it gave way
    assert any("[SPOT] Spot capacity did not return within the fallback budget (0 minutes)" in line
               for line in stream_text(mine.pk, "master"))
    assert any(line.startswith("[ON-DEMAND FALLBACK]") for line in stream_text(mine.pk, "master"))
