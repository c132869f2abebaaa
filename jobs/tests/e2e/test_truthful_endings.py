"""How a job ends is told truthfully, end to end (real agents, real torchrun, real SeaweedFS).

- A training script that is gone from object storage when the job starts fails the job with
  that cause in its status reason, not "No hardware fault signal: exited with code 1".
- A two-node run that completes reads clean: torchrun's exit-barrier teardown noise on the
  worker (a c10d TCPStore traceback) becomes one explained line.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from jobs.tests.storage import space_client
from nodeagent.teardown_noise import FOLDED_LINE

from .helpers import create_job, stream_text, wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_a_script_removed_from_storage_fails_the_job_with_that_cause(alice, start_nodes, upload_script, object_store, e2e_settings):
    url = upload_script("train_ddp.py").replace("train_ddp.py", "gone.py")
    client, space = space_client(alice, object_store.endpoint)  # Alice's own keys, as she would
    client.copy_object(Bucket=space.bucket, Key="uploads/gone.py", CopySource={"Bucket": space.bucket, "Key": "uploads/train_ddp.py"})
    job = create_job(alice, "script-gone", "python gone.py", script_url=url)
    client.delete_object(Bucket=space.bucket, Key="uploads/gone.py")  # deleted before any node took the job
    start_nodes("node-a")

    job = wait_for_status(job.pk, "Failed", "Completed", timeout=60)

    reason = f"Preparation failed on node-a: could not download the training script {url}: no such object"
    assert job.status_reason == reason
    api = APIClient()
    api.force_authenticate(alice)
    assert api.get(f"/api/v1/training-jobs/{job.pk}/").json()["status_reason"] == reason
    master = stream_text(job.pk, "master")
    assert f"[ERROR] Could not download the training script {url}: no such object" in master
    assert "[CONSOLE] master on node-a stopped: " + reason[:1].lower() + reason[1:] in master


def test_a_completed_two_node_run_ends_without_a_teardown_traceback(alice, start_nodes, training_script, upload_script,
                                                                    e2e_settings):
    start_nodes("node-a", "node-b")
    # the race maker reaches the job as an input of Alice's (a path of this checkout is not there:
    # the sandbox gives a job its own /tmp, where a CI clone may live)
    barrier = upload_script("slow_exit_barrier/sitecustomize.py").removesuffix("sitecustomize.py")
    command = "PYTHONPATH=$SIMPLEAI_INPUT_BARRIER torchrun train_ddp.py --steps 3"
    job = create_job(alice, "clean-ending", command, node_count=2, script_url=training_script,
                     inputs=[{"name": "barrier", "url": barrier}])

    job = wait_for_status(job.pk, "Completed", "Failed", timeout=150)

    assert job.status == "Completed", job.status_reason
    worker = stream_text(job.pk, "worker-1")
    assert any("rank 1 step 3 loss" in line for line in worker)
    folded = [line for line in worker if line.startswith(FOLDED_LINE.split(" (")[0])]
    assert len(folded) == 1, worker
    assert not [line for line in worker if "Traceback" in line or "frame #" in line or "remote server shutdown" in line], worker
    ending = [line for line in worker[-3:] if not line.startswith("[INFO] Resources used: ")]  # a sandbox's accounting
    assert ending[-2:] == ["[INFO] Command exited with code 0", "[INFO] OUTPUT_DIR is empty: nothing to upload"]
