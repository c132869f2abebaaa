"""Storing a node's queued messages (jobs.channel.inbox): a `preparing` report that arrives with
its `running` is stored with it, and what the node sees and what is stored are as if each had
been stored alone."""

from __future__ import annotations

import pytest

from jobs import actions, lifecycle
from jobs.channel.inbox import STORED, store_messages
from jobs.models import JobStatusChange, Placement, TrainingJob
from jobs.scheduling.decision import Assignment

from .factories import job_fields
from .test_nodes import make_node

pytestmark = pytest.mark.django_db


def placed(owner, node, name: str) -> TrainingJob:
    job = actions.create_job(owner, job_fields(name=name), [])
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])
    return job


def report(job: TrainingJob, state: str, msg_id: int) -> dict:
    return {"type": "attempt", "msg_id": msg_id, "job_id": job.pk, "attempt": 1, "role": "master", "state": state}


def stored_as(job: TrainingJob) -> tuple:
    placement = Placement.objects.get(attempt__job=job)
    history = list(JobStatusChange.objects.filter(job=job).order_by("pk").values_list("new_status", flat=True))
    return TrainingJob.objects.get(pk=job.pk).status, placement.state, placement.started_at is not None, history


def test_a_preparing_report_queued_with_its_running_is_stored_as_storing_each_alone_would(alice):
    node = make_node("gpu-01")
    alone, together = placed(alice, node, "alone"), placed(alice, node, "together")
    assert store_messages(node.pk, [report(alone, "preparing", 1)]) == [STORED]
    assert store_messages(node.pk, [report(alone, "running", 2)]) == [STORED]

    outcomes = store_messages(node.pk, [report(together, "preparing", 3), report(together, "running", 4)])

    assert outcomes == [STORED, STORED]  # both acknowledged
    assert stored_as(together) == stored_as(alone) == ("Running", "running", True, ["Pending", "Creating", "Running"])


def test_reports_of_two_placements_are_each_stored(alice):
    node = make_node("gpu-01")
    first, second = placed(alice, node, "first"), placed(alice, node, "second")
    outcomes = store_messages(node.pk, [report(first, "preparing", 1), report(second, "running", 2)])
    assert outcomes == [STORED, STORED]
    assert stored_as(first)[:2] == ("Creating", "preparing") and stored_as(second)[:2] == ("Running", "running")


def test_a_pair_for_another_nodes_placement_is_refused_both_times(alice):
    node, other = make_node("gpu-01"), make_node("gpu-02")
    job = placed(alice, node, "theirs")
    outcomes = store_messages(other.pk, [report(job, "preparing", 1), report(job, "running", 2)])
    assert [bool(o.refusal) for o in outcomes] == [True, True] and outcomes[0] == outcomes[1]
    assert stored_as(job)[:2] == ("Creating", "assigned")
