"""Many nodes' messages stored together (jobs.channel.inbox.store_batches): what each node is told
and what is stored are as if each message had been stored alone, in a number of statements that
does not grow with the nodes."""

from __future__ import annotations

import time

import pytest

from jobs import actions, lifecycle
from jobs.channel.inbox import STORED, store_batches, store_messages
from jobs.models import JobAttempt, JobStatusChange, Placement, TrainingJob
from jobs.scheduling.decision import Assignment
from monitoring.models import LogLine

from .factories import job_fields
from .test_nodes import make_node

pytestmark = pytest.mark.django_db


def placed(owner, nodes, name: str, gpu: int = 0) -> TrainingJob:
    job = actions.create_job(owner, job_fields(name=name, node_count=len(nodes)), [])
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (gpu,)) for node in nodes])
    return job


def report(job: TrainingJob, state: str, role: str = "master", **fields) -> dict:
    return {"type": "attempt", "msg_id": 0, "job_id": job.pk, "attempt": job.current_attempt or 1, "role": role,
            "state": state, **fields}


def lines(job: TrainingJob, role: str = "master", first: int = 1) -> dict:
    now = time.time()
    return {"type": "logs", "msg_id": 0, "job_id": job.pk, "attempt": 1, "stream": role,
            "lines": [[first, now, "step 1"], [first + 1, now, "step 2"]]}


def life(role: str, job: TrainingJob) -> list[dict]:
    return [report(job, "preparing", role), report(job, "running", role), lines(job, role),
            report(job, "exited", role, exit_code=0, output_url=f"s3://results/jobs/{job.pk}/attempt-1/{role}/")]


def stored_as(job: TrainingJob) -> tuple:
    job.refresh_from_db()
    attempt = JobAttempt.objects.get(job=job, number=1)
    return (
        job.status, job.status_reason, job.result_url.replace(f"/jobs/{job.pk}/", "/jobs/ID/"),
        list(JobStatusChange.objects.filter(job=job).order_by("pk").values_list("old_status", "new_status", "reason")),
        sorted(Placement.objects.filter(attempt__job=job).values_list("role", "state", "exit_code")),
        attempt.running_at is not None, attempt.ended_at is not None, attempt.cause, attempt.stop_requested_at is not None,
        LogLine.objects.filter(job=job).count(),
    )


def test_nodes_stored_together_end_as_if_each_message_was_stored_alone(alice):
    nodes = [make_node("gpu-01"), make_node("gpu-02")]
    alone, together = placed(alice, nodes, "alone"), placed(alice, nodes, "together", gpu=1)

    def rounds(job):  # the master starts, the worker runs and ends, then the master ends
        master, worker = life("master", job), life("worker-1", job)
        return [[(nodes[0], master[:2]), (nodes[1], worker)], [(nodes[0], master[2:])]]

    for batches in rounds(alone):
        for node, messages in batches:
            for message in messages:
                assert store_messages(node.pk, [message]) == [STORED]
    outcomes = [store_batches([(node.pk, messages, node.name) for node, messages in batches]) for batches in rounds(together)]

    assert outcomes == [[[STORED] * 2, [STORED] * 4], [[STORED] * 2]]
    assert stored_as(together) == stored_as(alone)
    assert stored_as(together)[:3] == ("Completed", "Every node's command exited with code 0", "s3://results/jobs/ID/attempt-1/")
    assert [row[1] for row in stored_as(together)[3]] == ["Pending", "Creating", "Running", "Completed"]


def test_a_refused_message_is_refused_alone_and_the_others_are_stored(alice, bob):
    mine, other = make_node("gpu-01"), make_node("gpu-02")
    alices, bobs = placed(alice, [mine], "alices"), placed(bob, [other], "bobs")
    outcomes = store_batches([
        (mine.pk, [report(alices, "running"), report(bobs, "running"), lines(bobs), lines(alices)], "gpu-01"),
        (other.pk, [report(bobs, "preparing")], "gpu-02"),
    ])
    assert outcomes[0][0] == STORED and outcomes[0][3] == STORED and outcomes[1] == [STORED]
    assert [o.refusal for o in outcomes[0][1:3]] == [
        f"this node has no placement of job {bobs.pk}, attempt 1, as master",
    ] * 2
    assert stored_as(alices)[0] == "Running" and stored_as(bobs)[0] == "Creating"
    assert LogLine.objects.filter(job=bobs).count() == 0 and LogLine.objects.filter(job=alices).count() == 2


def test_a_failure_in_a_batch_gets_its_decision_while_the_rest_complete(alice):
    nodes = [make_node(f"gpu-{i:02d}") for i in range(3)]
    failing = placed(alice, nodes[:2], "failing")
    fine = placed(alice, nodes[2:], "fine")
    outcomes = store_batches([
        (nodes[0].pk, [report(failing, "running"), report(failing, "exited", exit_code=1, message="Traceback: boom")], "gpu-00"),
        (nodes[1].pk, [report(failing, "running", "worker-1"), report(failing, "exited", "worker-1", signal=15)], "gpu-01"),
        (nodes[2].pk, [report(fine, "running"), report(fine, "exited", exit_code=0)], "gpu-02"),
    ])
    assert outcomes == [[STORED] * 2] * 3
    failing.refresh_from_db()
    assert failing.status == "Failed" and "exited with code 1" in failing.status_reason
    assert sorted(Placement.objects.filter(attempt__job=failing).values_list("state", flat=True)) == ["exited", "exited"]
    assert stored_as(fine)[0] == "Completed"


def test_the_last_exit_of_a_job_being_deleted_removes_it_with_its_lines(alice):
    node = make_node("gpu-01")
    job = placed(alice, [node], "doomed")
    assert store_messages(node.pk, [report(job, "running")]) == [STORED]
    actions.delete_job(job.pk)
    outcomes = store_batches([(node.pk, [lines(job), report(job, "exited", signal=15), lines(job, first=3)], "gpu-01")])
    assert outcomes == [[STORED] * 3]  # lines of a deleted job are dropped quietly
    assert not TrainingJob.objects.filter(pk=job.pk).exists() and not LogLine.objects.filter(job_id=job.pk).exists()


def test_a_resent_batch_changes_nothing_more(alice):
    node = make_node("gpu-01")
    job = placed(alice, [node], "resent")
    batch = [(node.pk, life("master", job), "gpu-01")]
    assert store_batches(batch) == [[STORED] * 4]
    before = stored_as(job)
    assert store_batches(batch) == [[STORED] * 4]  # what was not acknowledged is sent again
    assert stored_as(job) == before


@pytest.mark.parametrize("count", [2, 20])
def test_storing_many_nodes_together_costs_the_same_statements_as_a_few(alice, django_assert_num_queries, count):
    nodes = [make_node(f"gpu-{i:02d}") for i in range(count)]
    jobs = [placed(alice, [node], f"run-{i}") for i, node in enumerate(nodes)]
    batches = [(node.pk, life("master", job), node.name) for node, job in zip(nodes, jobs, strict=True)]
    # the transaction, the jobs and their placements locked, a log-target read and one INSERT;
    # placements, attempts started and ended, jobs, history rows and stop times each written once
    with django_assert_num_queries(14):
        assert store_batches(batches) == [[STORED] * 4] * count
    assert {TrainingJob.objects.get(pk=job.pk).status for job in jobs} == {"Completed"}


def test_a_batch_that_cannot_be_stored_together_is_stored_one_by_one(alice, monkeypatch):
    node = make_node("gpu-01")
    job = placed(alice, [node], "careful")
    calls, original = [], lifecycle.record_placements

    def broken_together(items, with_jobs=()):
        calls.append(len(items))
        if len(items) > 1:
            raise RuntimeError("a defect in the bulk path")
        return original(items, with_jobs)

    monkeypatch.setattr(lifecycle, "record_placements", broken_together)
    assert store_batches([(node.pk, life("master", job), "gpu-01")]) == [[STORED] * 4]
    assert calls[0] == 3 and set(calls[1:]) == {1}  # tried together once, then message by message
    assert stored_as(job)[0] == "Completed" and LogLine.objects.filter(job=job).count() == 2

