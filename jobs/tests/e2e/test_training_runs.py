"""A job created in the console really trains on node agents (real processes end to end)."""

from __future__ import annotations

import subprocess

import pytest

from jobs import actions
from jobs.models import Placement, TrainingJob
from jobs.tests.storage import space_client

from .helpers import create_job, stream_text, wait_for_status
from .stack import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]
# behaviour both runtimes share: the same test, on agents with --runtime process and --runtime docker
BOTH_RUNTIMES = pytest.mark.parametrize("runtime", ["process", "docker"], indirect=True)


def test_a_two_node_ddp_job_trains_on_both_nodes_and_completes(alice, start_nodes, training_script, object_store, e2e_settings):
    start_nodes("node-a", "node-b")
    job = create_job(alice, "ddp-run", "torchrun train_ddp.py --steps 12", node_count=2, script_url=training_script)

    job = wait_for_status(job.pk, "Completed", "Failed", timeout=150)

    assert job.status == "Completed", job.status_reason
    master, worker = stream_text(job.pk, "master"), stream_text(job.pk, "worker-1")
    assert any("rank 0 step 12 loss" in line for line in master)
    assert any("rank 1 step 12 loss" in line for line in worker)
    # the agent's preparation steps come first, in the job's own stream
    assert any(f"Downloading training script {training_script}" in line for line in master)
    assert any("Starting the command" in line for line in worker)
    # the output went to Alice's own storage space, where the job page says it is, and her keys read it
    client, space = space_client(alice, object_store.endpoint)
    assert job.result_url.startswith(f"s3://{space.bucket}/jobs/{job.pk}/")
    bucket, _, prefix = job.result_url[len("s3://"):].partition("/")
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]
    assert any(key.endswith("master/model.pt") for key in keys), keys


@BOTH_RUNTIMES
def test_a_failing_command_fails_the_job_and_stops_the_other_node(alice, start_nodes, e2e_settings, runtime):
    start_nodes("node-a", "node-b")
    command = 'if [ "$NODE_RANK" = 1 ]; then sleep 2; echo "boom"; exit 3; fi; sleep 307'
    job = create_job(alice, "fails", command, node_count=2, **runtime.job_fields())

    job = wait_for_status(job.pk, "Failed", "Completed", timeout=60)

    assert job.status == "Failed"
    assert job.status_reason == "The command exited with code 3"
    assert any("[CONSOLE] worker-1 on node-b stopped: the command exited with code 3" in line
               for line in stream_text(job.pk, "worker-1"))
    master = wait_until(
        lambda: Placement.objects.filter(attempt__job=job, role="master", state="exited").first(),
        timeout=20, message="the master's process to be stopped",
    )
    assert master.exit_signal == 15 or master.exit_code is not None
    assert subprocess.run(["pgrep", "-f", "sleep 307"], capture_output=True).returncode == 1
    assert runtime.containers(job.pk) == []


@BOTH_RUNTIMES
def test_deleting_a_running_job_stops_its_processes_on_both_nodes(alice, start_nodes, e2e_settings, runtime):
    start_nodes("node-a", "node-b")
    job = create_job(alice, "to-delete", "echo started; sleep 311", node_count=2, **runtime.job_fields())
    wait_for_status(job.pk, "Running", timeout=60)

    assert actions.delete_job(job.pk) == "terminating"

    wait_until(lambda: not TrainingJob.objects.filter(pk=job.pk).exists(), timeout=30, message="the job to be removed")
    assert subprocess.run(["pgrep", "-f", "sleep 311"], capture_output=True).returncode == 1
    assert runtime.containers(job.pk) == []


@BOTH_RUNTIMES
def test_a_console_restart_mid_job_loses_and_duplicates_no_line(alice, stack, start_nodes, e2e_settings, runtime):
    start_nodes("node-a", "node-b")
    command = "python -c 'import time\nfor i in range(80):\n    print(f\"line {i}\", flush=True); time.sleep(0.1)'"
    job = create_job(alice, "survives-restart", command, node_count=2, **runtime.job_fields())
    wait_for_status(job.pk, "Running", timeout=60)
    wait_until(lambda: len(stream_text(job.pk, "master")) > 10, timeout=20, message="the first lines")

    stack.stop_console()
    import time

    time.sleep(3)  # the command keeps printing; the agents spool what they cannot send
    stack.start_console()

    wait_for_status(job.pk, "Completed", timeout=90)
    for stream in ("master", "worker-1"):
        printed = [line for line in stream_text(job.pk, stream) if line.startswith("line ")]
        assert printed == [f"line {i}" for i in range(80)], stream
    assert runtime.containers(job.pk) == []
