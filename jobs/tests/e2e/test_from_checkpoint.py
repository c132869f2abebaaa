"""A job created with `from_checkpoint` of a finished job starts where that job stopped (issue 33
item 7): a real console (daphne, Celery), a node agent, real PyTorch on CPU checkpointing
through the concurrent checkpointing library into the owner's SeaweedFS space.

The new job is created through the REST API of the running console, as the `simpleai` command
creates it; the console's Celery worker copies the checkpoint (re-signed with the new job's key:
the library refuses a checkpoint its job's key does not verify) before the scheduler places it,
and its first attempt gets CKPT_LAST_STEP and loads the copy.
"""

from __future__ import annotations

import re

import pytest
import requests
from rest_framework.authtoken.models import Token

from jobs.models import JobAttempt, TrainingJob
from monitoring.models import LogLine

from .helpers import create_job, last_lines, wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

TRAIN = "PYTHONPATH=$CHECKPOINT_VENDOR torchrun train_ckpt.py --steps {steps} --every 5 --sleep 0.02"


def steps_logged(job_id: int) -> list[int]:
    texts = LogLine.objects.filter(job_id=job_id, stream="master").order_by("attempt", "seq").values_list("text", flat=True)
    return [int(m.group(1)) for t in texts if (m := re.match(r"step (\d+) loss", t))]


@pytest.mark.duration(80)
def test_a_job_from_a_finished_jobs_checkpoint_starts_at_its_last_step(alice, stack, start_nodes, upload_script, e2e_settings):
    start_nodes("ckpt-node")
    script = upload_script("train_ckpt.py")
    source = create_job(alice, "pretrain", TRAIN.format(steps=10), script_url=script)
    source = wait_for_status(source.pk, "Completed", "Failed", "Pending - internalerror", timeout=120)
    assert source.status == "Completed", f"{source.status_reason}\n{last_lines(source.pk)}"
    assert source.checkpoint_step == 10

    token = Token.objects.create(user=alice).key
    body = {
        "name": "finetune", "server_type": "g2", "gpus_per_node": 1, "shm_size_gb": 8, "image_url": "",
        "script_url": script, "command": TRAIN.format(steps=15), "from_checkpoint": source.pk,
    }
    answer = requests.post(f"{stack.url}/api/v1/training-jobs/", json=body, headers={"Authorization": f"Token {token}"},
                           timeout=30)
    assert answer.status_code == 201, answer.text
    assert answer.json()["from_checkpoint"] == source.pk and answer.json()["from_checkpoint_step"] == 10

    job = wait_for_status(answer.json()["id"], "Completed", "Failed", "Pending - internalerror", timeout=120)
    assert job.status == "Completed", f"{job.status_reason}\n{last_lines(job.pk)}"
    assert JobAttempt.objects.get(job=job).resume_step == 10
    master = list(LogLine.objects.filter(job=job, stream="master").values_list("text", flat=True))
    assert any(line.startswith("resumed from checkpoint step 10") for line in master), last_lines(job.pk, 30)
    assert steps_logged(job.pk) == [11, 12, 13, 14, 15]  # not from zero
    assert TrainingJob.objects.get(pk=job.pk).checkpoint_step == 15  # its own checkpoints carry on in its prefix
