"""Partial recovery end to end: when one node of a 2-node job dies, the healthy node keeps its
rank and what it prepared (no download, its local checkpoint copy), only the failed rank moves
to a spare node, and the job resumes from its newest checkpoint and completes."""

from __future__ import annotations

import re

import pytest

from jobs.models import JobAttempt, TrainingJob

from .helpers import create_job, stream_text, wait_for_checkpoint, wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

TRAIN = "PYTHONPATH=$CHECKPOINT_VENDOR torchrun train_ckpt.py --steps 45 --every 5 --sleep 0.15"


def nodes_by_role(job: TrainingJob, number: int) -> dict[str, str]:
    return dict(JobAttempt.objects.get(job=job, number=number).placements.values_list("role", "node_name"))


def attempt_lines(job: TrainingJob, stream: str, marker: str) -> list[str]:
    """The stream's lines after the marker line the console writes when attempt 2 is placed."""
    lines = stream_text(job.pk, stream)
    opening = next(i for i, line in enumerate(lines) if line.startswith(marker))
    return lines[opening:]


@pytest.mark.duration(50)
def test_a_dead_worker_node_moves_alone_and_the_master_reuses_what_it_prepared(alice, start_nodes, upload_script, e2e_settings):
    agents = {a.name: a for a in start_nodes("node-a", "node-b", "node-c")}
    job = create_job(alice, "partial", TRAIN, node_count=2, failover_enabled=True, script_url=upload_script("train_ckpt.py"))
    wait_for_status(job.pk, "Running", timeout=120)
    wait_for_checkpoint(job.pk, 10, timeout=180)  # torchrun's start alone took 55 s on a machine at load 19
    before = nodes_by_role(TrainingJob.objects.get(pk=job.pk), 1)

    agents[before["worker-1"]].kill()  # the worker's node dies (and stays away)

    job = wait_for_status(job.pk, "Completed", "Failed", "Pending - internalerror", "Pending - maxretriesexceeded", timeout=240)
    assert job.status == "Completed", job.status_reason
    assert job.current_attempt == 2
    after = nodes_by_role(job, 2)
    [spare] = {"node-a", "node-b", "node-c"} - set(before.values())
    assert after == {"master": before["master"], "worker-1": spare}  # only the failed rank moved

    resumed = JobAttempt.objects.get(job=job, number=2)
    master = attempt_lines(job, "master", "[FAILOVER]")
    # the healthy node prepared nothing again and read the checkpoint from its own disk
    assert any(line.startswith("[INFO] Partial recovery: this node ran attempt 1 of the job; reusing its working "
                               "directory") and f"checkpoint step {resumed.resume_step}" in line for line in master)
    assert not any(line.startswith("[INFO] Downloading training script") for line in master)
    assert f"resumed from checkpoint step {resumed.resume_step} (local)" in master
    # the spare prepared from scratch, and training went on from the checkpoint, not from zero
    worker = attempt_lines(job, "worker-1", "[FAILOVER]")
    assert any(line.startswith("[INFO] Downloading training script") for line in worker)
    steps = [int(m.group(1)) for line in master if (m := re.match(r"step (\d+) loss", line))]
    assert steps[0] == resumed.resume_step + 1 and steps[-1] == 45
