"""Failover assessments end even when their delayed recheck is lost, and however long the
reason a command gives (issue: a 3,600 s unacked task, then a 500-character reason, stuck jobs)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import TrainingJob
from jobs.recovery import failover

from .test_failover_flow import exit_report, make_node, running_job

pytestmark = pytest.mark.django_db


def test_a_lost_recheck_task_is_made_up_for_by_the_sweep(alice):
    node = make_node("gpu-01")
    job = exit_report(running_job(alice, node, failover_enabled=True), node, signal=9)
    assert job.status == "Pending - failoverinprogress"  # the delayed recheck task is lost here

    assert failover.finish_overdue_assessments() == []  # not overdue yet: the task may still come
    later = timezone.now() + timedelta(seconds=failover.RECHECK_SECONDS * 3 + 1)
    assert failover.finish_overdue_assessments(now=later) == [job.pk]

    job.refresh_from_db()
    assert job.status == "Pending - internalerror"  # no new evidence, the node alive: no failover
    assert failover.finish_overdue_assessments(now=later) == []


@pytest.mark.parametrize(("failover_enabled", "status"), [(False, "Failed"), (True, "Pending - internalerror")])
def test_a_reason_longer_than_the_column_still_ends_the_job(alice, failover_enabled, status):
    node = make_node("gpu-01")
    job = running_job(alice, node, failover_enabled=failover_enabled)
    cause = "could not download the training script: " + "x" * 3000  # the agent's words, as long as they come

    job = exit_report(job, node, exit_code=1, message=cause, failure="script_download")

    assert job.status == status
    assert "reparation failed on gpu-01: could not download the training script: xxx" in job.status_reason
    assert len(job.status_reason) == TrainingJob._meta.get_field("status_reason").max_length
