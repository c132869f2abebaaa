"""Job Failover end to end: simulated GPU faults, lost nodes, real CPU training resuming from checkpoints."""

from __future__ import annotations

import re

import pytest

from jobs.models import JobAttempt, Node, TrainingJob
from jobs.nodes import hardware
from monitoring.models import LogLine

from .helpers import create_job, stream_text, wait_for_checkpoint, wait_for_status
from .stack import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

TRAIN = "PYTHONPATH=$CHECKPOINT_VENDOR torchrun train_ckpt.py --steps {steps} --every 5 --sleep 0.15"


def inject(node_name: str, kind: str = "xid", gpu: int = 0, xid: int | None = 79) -> None:
    hardware.inject_fault(Node.objects.get(name=node_name).pk, kind, gpu, xid)


def node_of(job: TrainingJob, role: str = "master") -> str:
    return JobAttempt.objects.get(job=job, number=job.current_attempt).placements.get(role=role).node_name


def steps_logged(job_id: int, stream: str, attempt: int) -> list[int]:
    texts = LogLine.objects.filter(job_id=job_id, stream=stream, attempt=attempt).order_by("seq").values_list("text", flat=True)
    return [int(m.group(1)) for t in texts if (m := re.match(r"step (\d+) loss", t))]


def history(job: TrainingJob) -> list[str]:
    return list(job.status_changes.values_list("new_status", flat=True))


@pytest.mark.duration(35)
def test_an_xid_79_fails_a_two_node_job_over_and_it_resumes_from_its_checkpoint(alice, start_nodes, upload_script, e2e_settings):
    start_nodes("node-a", "node-b", "node-c")
    job = create_job(alice, "survives-xid", TRAIN.format(steps=45), node_count=2, failover_enabled=True,
                     script_url=upload_script("train_ckpt.py"))
    wait_for_status(job.pk, "Running", timeout=60)
    wait_for_checkpoint(job.pk, 10, timeout=60)
    faulty = node_of(TrainingJob.objects.get(pk=job.pk))

    inject(faulty)

    job = wait_for_status(job.pk, "Completed", "Failed", "Pending - internalerror", "Pending - maxretriesexceeded", timeout=150)
    assert job.status == "Completed", job.status_reason
    assert history(job)[-4:] == ["Pending - failoverinprogress", "Creating", "Running", "Completed"]
    resumed = JobAttempt.objects.get(job=job, number=2)
    assert resumed.kind == "failover" and resumed.resume_step >= 10
    assert faulty not in set(resumed.placements.values_list("node_name", flat=True))
    node = Node.objects.get(name=faulty)
    assert node.cordoned and "XID 79 on GPU 0" in node.cordon_reason
    assert "XID 79 on GPU 0" in JobAttempt.objects.get(job=job, number=1).cause
    # training continued from the checkpoint step, not from zero, in the same stream
    assert steps_logged(job.pk, "master", 2)[0] == resumed.resume_step + 1
    master = stream_text(job.pk, "master")
    assert sum("Starting dataset initialization" in line for line in master) == 2
    assert any(line.startswith("[FAILOVER]") and f"resuming from checkpoint step {resumed.resume_step}" in line for line in master)
    assert job.failover_count == 1


def test_a_python_exception_is_internalerror_without_retry(alice, start_nodes, e2e_settings):
    start_nodes("node-a", "node-b")
    job = create_job(alice, "user-bug", "python -c \"raise ValueError('bad learning rate')\"", failover_enabled=True)

    job = wait_for_status(job.pk, "Pending - internalerror", "Failed", "Completed", timeout=60)

    assert job.status == "Pending - internalerror"
    assert job.status_reason == "The command exited with code 1 (a Python exception): not a hardware fault, so no failover"
    assert history(job)[-2:] == ["Pending - failoverinprogress", "Pending - internalerror"]
    assert job.attempts.count() == 1
    assert any("[CONSOLE]" in line and "a Python exception" in line for line in stream_text(job.pk, "master"))


@pytest.mark.duration(50)
def test_a_killed_agent_loses_its_node_the_job_fails_over_and_the_node_is_fenced_after(alice, start_nodes, upload_script, e2e_settings):
    agents = {a.name: a for a in start_nodes("node-a", "node-b", "node-c")}
    job = create_job(alice, "agent-dies", TRAIN.format(steps=45), node_count=2, failover_enabled=True,
                     script_url=upload_script("train_ckpt.py"))
    wait_for_status(job.pk, "Running", timeout=60)
    wait_for_checkpoint(job.pk, 5, timeout=60)
    victim = node_of(TrainingJob.objects.get(pk=job.pk))

    agents[victim].kill()

    job = wait_for_status(job.pk, "Completed", "Failed", "Pending - internalerror", timeout=150)
    assert job.status == "Completed", job.status_reason
    # the surviving rank's exit or the watchdog, whichever came first, named the node that went away
    cause = JobAttempt.objects.get(job=job, number=1).cause
    assert f"node {victim}" in cause and ("stopped answering" in cause or "lost its agent's connection" in cause)
    wait_until(lambda: Node.objects.get(name=victim).lost, timeout=30, message="the node to be declared Lost")
    old_lines = LogLine.objects.filter(job=job, attempt=1).count()

    agents[victim].start()  # the node comes back: it must not run or write for attempt 1
    wait_until(lambda: Node.objects.get(name=victim).connected, timeout=30, message="the node to reconnect")
    wait_until(lambda: "the node agent restarted" in agents[victim].output() or "stopping placement" in agents[victim].output()
               or LogLine.objects.filter(job=job, attempt=1).count() == old_lines, timeout=15, message="recovery")
    assert LogLine.objects.filter(job=job, attempt=1).count() == old_lines
    job.refresh_from_db()
    assert job.status == "Completed" and job.current_attempt == 2


def test_the_fourth_hardware_fault_gives_maxretriesexceeded(alice, start_nodes, e2e_settings):
    start_nodes("node-a", "node-b", "node-c", "node-d")
    job = create_job(alice, "unlucky", "echo training; sleep 300", failover_enabled=True)
    for attempt in range(1, 5):
        wait_until(lambda a=attempt: TrainingJob.objects.get(pk=job.pk).status == "Running"
                   and TrainingJob.objects.get(pk=job.pk).current_attempt == a, timeout=60, message=f"attempt {attempt} running")
        inject(node_of(TrainingJob.objects.get(pk=job.pk)), kind="gpu_lost", xid=None)
        if attempt < 4:
            wait_until(lambda a=attempt: TrainingJob.objects.get(pk=job.pk).current_attempt == a + 1, timeout=60, message="the failover")

    job = wait_for_status(job.pk, "Pending - maxretriesexceeded", timeout=60)
    assert job.failover_count == 3
    assert job.attempts.count() == 4
    assert "3 failovers done" in job.status_reason


def test_with_failover_off_a_fault_fails_the_job(alice, start_nodes, e2e_settings):
    start_nodes("node-a", "node-b")
    job = create_job(alice, "no-failover", "echo training; sleep 300", failover_enabled=False)
    wait_for_status(job.pk, "Running", timeout=60)

    inject(node_of(TrainingJob.objects.get(pk=job.pk)), xid=48)

    job = wait_for_status(job.pk, "Failed", timeout=60)
    assert history(job)[-2:] == ["Running", "Failed"]
    assert "XID 48 on GPU 0" in job.status_reason
    assert job.attempts.count() == 1
