"""The slurmrestd client against a real slurmrestd: every API version, JWT, errors a user can read."""

from __future__ import annotations

import time

import pytest

from jobs.slurm import jobcomp, jwt
from jobs.slurm.client import SlurmAuthError, SlurmClient, SlurmRefused, SlurmUnreachable
from jobs.tests.e2e.stack import wait_until

pytestmark = pytest.mark.slow


def properties(slurm, nodes: int = 2, gpus: int = 1, name: str = "simpleai-0-client") -> dict:
    return {
        "name": name, "nodes": nodes, "tasks_per_node": 1, "gres": f"gpu:{gpus}", "partition": "ondemand",
        "requeue": False, "current_working_directory": str(slurm.work_dir),
        "standard_output": f"{slurm.work_dir}/slurm-%j.out", "environment": {"PATH": "/usr/bin:/bin"},
    }


@pytest.mark.parametrize("version", ["v0.0.36", "v0.0.37", "v0.0.38"])
def test_every_api_version_submits_reads_and_cancels_a_two_node_job(idle_slurm, version):
    client = idle_slurm.client(version)
    assert client.ping() == "22.05.8"
    script = "#!/bin/bash\nsrun bash -c 'echo $SLURMD_NODENAME GPUs=$CUDA_VISIBLE_DEVICES'\nsleep 60\n"

    job_id = client.submit(script, properties(idle_slurm, gpus=2)).job_id

    running = wait_until(lambda: (j := client.job(job_id)) and j.state == "RUNNING" and j, timeout=20, message="RUNNING")
    assert running.nodes == ("n1", "n2") and running.restart_count == 0 and running.start_time is not None
    assert job_id in {j.job_id for j in client.jobs()}
    out = idle_slurm.work_dir / f"slurm-{job_id}.out"

    def both_lines() -> bool:  # RUNNING comes before srun's step has launched: cancel after it printed
        text = out.read_text() if out.exists() else ""
        return "n1 GPUs=0,1" in text and "n2 GPUs=0,1" in text  # the fake GPU devices, as gres

    wait_until(both_lines, timeout=30, message="both nodes' step lines")
    client.cancel(job_id)
    wait_until(lambda: client.job(job_id).state == "CANCELLED", timeout=20, message="CANCELLED")


def test_the_exit_code_of_a_failed_job_comes_from_its_completion_record(idle_slurm):
    client = idle_slurm.client()
    job_id = client.submit("#!/bin/bash\nexit 7\n", properties(idle_slurm, nodes=1)).job_id

    wait_until(lambda: client.job(job_id).state == "FAILED", timeout=20, message="FAILED")
    records = wait_until(lambda: jobcomp.read(str(idle_slurm.jobcomp), [job_id]).get(job_id), timeout=10, message="a record")
    assert (records[-1].state, records[-1].exit_code, records[-1].exit_signal) == ("FAILED", 7, 0)


def test_a_submission_slurm_can_never_run_is_refused_with_slurms_words(idle_slurm):
    with pytest.raises(SlurmRefused, match="Invalid feature specification"):
        idle_slurm.client().submit("#!/bin/bash\ntrue\n", {**properties(idle_slurm, nodes=1), "constraints": "no-such-feature"})


def test_a_job_slurm_queues_with_a_complaint_is_submitted_not_refused(idle_slurm):
    client = idle_slurm.client()
    # more nodes than the partition has up: slurmctld answers with an error *and* a job id, and queues it
    submitted = client.submit("#!/bin/bash\ntrue\n", properties(idle_slurm, nodes=3))

    assert submitted.warnings == ("Requested partition configuration not available now",)
    view = wait_until(lambda: (j := client.job(submitted.job_id)) and j.reason != "None" and j, timeout=10, message="a reason")
    assert view.state == "PENDING" and view.reason in ("PartitionNodeLimit", "PartitionConfig")  # Slurm names either


def test_a_job_slurm_does_not_know_is_none_and_cancelling_it_is_harmless(idle_slurm):
    client = idle_slurm.client()
    assert client.job(987654) is None
    client.cancel(987654)


def test_it_finds_node_addresses_states_and_partitions(idle_slurm):
    client = idle_slurm.client()
    assert client.node_address("n1") == "127.0.0.1"
    assert client.node_states() == {"n1": "idle", "n2": "idle"}
    assert {"ondemand", "spot"} <= set(client.partitions())


def test_a_token_from_scontrol_works_like_a_minted_one(idle_slurm):
    token = idle_slurm.scontrol("token", f"username={idle_slurm.job_user}", "lifespan=60").strip().removeprefix("SLURM_JWT=")
    client = SlurmClient(idle_slurm.rest_url, "v0.0.38", idle_slurm.job_user, lambda: token)
    assert client.ping() == "22.05.8"


@pytest.mark.parametrize("token", [
    lambda slurm: "not-a-token",
    lambda slurm: jwt.mint(b"another key", slurm.job_user),
    lambda slurm: jwt.mint(slurm.jwt_key, slurm.job_user, lifespan=1, now=time.time() - 60),  # expired
])
def test_a_token_slurm_does_not_accept_says_so(idle_slurm, token):
    client = SlurmClient(idle_slurm.rest_url, "v0.0.38", idle_slurm.job_user, lambda: token(idle_slurm))
    with pytest.raises(SlurmAuthError, match="does not accept the token of user 'root'"):
        client.jobs()


def test_an_address_where_no_slurmrestd_listens_is_unreachable():
    with pytest.raises(SlurmUnreachable, match="is unreachable"):
        SlurmClient("http://127.0.0.1:9", "v0.0.38", "root", lambda: "t", timeout=2).ping()
