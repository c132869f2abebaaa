"""The batch job of a Training Job: its script and its submission, as one plain function builds them."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

from jobs.slurm.adapters import ADAPTERS, adapter_for
from jobs.slurm.batch_script import (
    BatchSpec,
    build_batch_script,
    job_id_from_name,
    launcher_words,
    slurm_job_name,
    submission,
)

SPEC = BatchSpec(
    job_id=42, job_name="llama-ft", node_count=4, gpus_per_node=8, partition="gpu", requeue=True,
    console_url="http://console:8000", launch_key="secret-key", launcher="/opt/simpleai/venv/bin/python -m nodeagent.slurm_step",
    work_dir="/var/tmp/simpleai", server_type="g2", gpu_metrics="auto", stop_grace_seconds=25,
)


def test_the_script_starts_one_launcher_task_on_every_allocated_node():
    script = build_batch_script(SPEC)
    assert script.startswith("#!/bin/bash\n")
    srun = script[script.index("exec srun"):]
    assert '--nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1' in srun
    # one rank failing ends the step: srun kills the other ranks
    assert "--kill-on-bad-exit=1" in srun
    assert ("/opt/simpleai/venv/bin/python -m nodeagent.slurm_step run --work-dir /var/tmp/simpleai "
            "--grace 25 --gpus auto --server-type g2 --metrics-interval 10") in srun


def test_the_script_trades_the_launch_key_for_a_run_token_and_hides_the_key_from_the_tasks():
    script = build_batch_script(SPEC)
    # redeemed while srun starts the launchers; the token reaches them on srun's standard input
    redeem = script.index("exec 3< <(/opt/simpleai/venv/bin/python -m nodeagent.slurm_step token)")
    assert redeem < script.index("unset SIMPLEAI_LAUNCH_KEY") < script.index("exec srun --input=all")
    assert script.rstrip().endswith("<&3 3<&-")
    assert "secret-key" not in script  # the key travels in the job's environment only


def test_the_script_is_valid_bash():
    assert subprocess.run(["bash", "-n"], input=build_batch_script(SPEC), text=True).returncode == 0


def test_a_launcher_with_spaces_and_quotes_stays_one_command():
    spec = dataclasses.replace(SPEC, launcher="env 'PYTHONPATH=/opt/simple ai' python3 -m nodeagent.slurm_step")
    script = build_batch_script(spec)
    assert "env 'PYTHONPATH=/opt/simple ai' python3 -m nodeagent.slurm_step token" in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


@pytest.mark.parametrize("launcher", ["", "   ", "python 'unbalanced"])
def test_it_refuses_a_launcher_that_is_no_command_line(launcher):
    with pytest.raises(ValueError):
        launcher_words(launcher)


def test_the_submission_asks_for_n_nodes_with_their_gpus_in_the_partition_and_allows_requeue():
    job = submission(SPEC)
    assert job["nodes"] == 4 and job["tasks_per_node"] == 1
    assert job["gres"] == "gpu:8"
    assert job["partition"] == "gpu"
    assert job["requeue"] is True
    assert job["name"] == "simpleai-42-llama-ft"
    assert job["current_working_directory"] == "/var/tmp/simpleai"
    assert job["standard_output"] == "/var/tmp/simpleai/slurm-%j.out"
    assert job["environment"]["SIMPLEAI_LAUNCH_KEY"] == "secret-key"
    assert job["environment"]["SIMPLEAI_CONSOLE_URL"] == "http://console:8000"
    assert job["environment"]["SIMPLEAI_JOB_ID"] == "42"
    assert job["environment"]["PATH"]  # a job submitted over REST inherits no environment


def test_a_job_slurm_must_not_run_again_is_submitted_without_requeue():
    assert submission(dataclasses.replace(SPEC, requeue=False))["requeue"] is False


def test_the_console_finds_its_jobs_by_name():
    assert job_id_from_name(slurm_job_name(42, "llama-ft")) == 42
    assert job_id_from_name("someone-elses-job") is None
    assert job_id_from_name("simpleai-x-y") is None


@pytest.mark.parametrize("version", sorted(ADAPTERS))
def test_every_api_version_gets_the_submission_in_its_own_words(version):
    body = adapter_for(version).submit_body("#!/bin/bash\n", submission(SPEC))
    assert body["script"] == "#!/bin/bash\n"
    output = "standard_out" if version == "v0.0.36" else "standard_output"
    assert body["job"][output] == "/var/tmp/simpleai/slurm-%j.out"
    assert body["job"]["gres"] == "gpu:8" and body["job"]["nodes"] == 4


def test_an_unknown_api_version_is_refused_with_the_supported_ones():
    with pytest.raises(ValueError, match="v0.0.38"):
        adapter_for("v0.0.41")
