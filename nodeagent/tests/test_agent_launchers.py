"""The platform's `deepspeed` and `accelerate` wrappers (nodeagent/launchers): what they hand the
training environment's own launcher, on one node and on several. The real launchers are replaced
by scripts that print their arguments; the e2e tests run the real ones."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from nodeagent.environment import LAUNCHERS_DIR


@pytest.fixture
def environment_bin(tmp_path) -> Path:
    """A training environment's bin/ whose `deepspeed` and `accelerate` print what they were given."""
    folder = tmp_path / "env-bin"
    folder.mkdir()
    for name in ("deepspeed", "accelerate"):
        script = folder / name
        script.write_text(f'#!/usr/bin/env bash\necho "{name} $*"\necho "PATH=$PATH"\n'
                          'for f in "$@"; do case "$f" in --hostfile=*) cat "${f#--hostfile=}";; esac; done\n')
        script.chmod(0o755)
    return folder


def run(command: list[str], environment_bin: Path, tmp_path: Path, **job: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{LAUNCHERS_DIR}:{environment_bin}:/usr/bin:/bin", "TMPDIR": str(tmp_path),
           "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29411", "NNODES": "1", "NODE_RANK": "0", "GPUS_PER_NODE": "8", **job}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)


def test_deepspeed_on_several_nodes_joins_them_without_ssh(environment_bin, tmp_path):
    result = run(["deepspeed", "--num_gpus=2", "train.py", "--zero", "3"], environment_bin, tmp_path, NNODES="3", NODE_RANK="2")
    first = result.stdout.splitlines()[0].split()
    assert first[0] == "deepspeed" and first[-4:] == ["--num_gpus=2", "train.py", "--zero", "3"]
    assert "--no_ssh" in first and "--node_rank=2" in first and "--master_addr=10.0.0.5" in first and "--master_port=29411" in first
    # the hostfile names every node of the job with its slots, in node-rank order
    assert result.stdout.splitlines()[2:] == ["node-0 slots=8", "node-1 slots=8", "node-2 slots=8"]
    assert "deepspeed: node 2 of 3, master 10.0.0.5:29411 (no ssh)" in result.stderr
    # the wrapper's own directory is gone from PATH for the real launcher and what it starts
    assert str(LAUNCHERS_DIR) not in result.stdout.splitlines()[1]


def test_deepspeed_on_one_node_only_gets_the_job_s_port(environment_bin, tmp_path):
    result = run(["deepspeed", "--num_gpus=2", "train.py"], environment_bin, tmp_path)
    assert result.stdout.splitlines()[0] == "deepspeed --master_port=29411 --num_gpus=2 train.py"


def test_deepspeed_options_the_command_gives_are_left_alone(environment_bin, tmp_path):
    result = run(["deepspeed", "--hostfile", "/etc/hosts.ds", "--master_port=1234", "train.py"], environment_bin, tmp_path, NNODES="2")
    assert result.stdout.splitlines()[0] == "deepspeed --hostfile /etc/hosts.ds --master_port=1234 train.py"


def test_options_after_the_script_belong_to_the_script(environment_bin, tmp_path):
    result = run(["deepspeed", "train.py", "--master_port=7"], environment_bin, tmp_path)
    assert result.stdout.splitlines()[0] == "deepspeed --master_port=29411 train.py --master_port=7"


def test_accelerate_launch_on_several_nodes_gets_the_machines(environment_bin, tmp_path):
    command = ["accelerate", "launch", "--config_file", "cfg.yaml", "--num_processes", "4", "train.py"]
    result = run(command, environment_bin, tmp_path, NNODES="2", NODE_RANK="1")
    assert result.stdout.splitlines()[0] == (
        "accelerate launch --main_process_port=29411 --num_machines=2 --machine_rank=1 --main_process_ip=10.0.0.5 "
        "--config_file cfg.yaml --num_processes 4 train.py"
    )
    assert "accelerate: machine 1 of 2, main process 10.0.0.5:29411" in result.stderr


def test_accelerate_on_one_node_and_other_subcommands(environment_bin, tmp_path):
    assert run(["accelerate", "launch", "train.py"], environment_bin, tmp_path).stdout.splitlines()[0] == (
        "accelerate launch --main_process_port=29411 train.py")
    assert run(["accelerate", "env"], environment_bin, tmp_path, NNODES="2").stdout.splitlines()[0] == "accelerate env"
    given = ["accelerate", "launch", "--num_machines", "4", "--machine_rank", "3", "train.py"]
    assert run(given, environment_bin, tmp_path, NNODES="2").stdout.splitlines()[0] == (
        "accelerate launch --main_process_port=29411 --num_machines 4 --machine_rank 3 train.py")


@pytest.fixture
def accelerate_telling_its_env(tmp_path) -> Path:
    folder = tmp_path / "env-bin-cpu"
    folder.mkdir()
    (folder / "accelerate").write_text('#!/usr/bin/env bash\necho "accelerate $*"\necho "ACCELERATE_USE_CPU=${ACCELERATE_USE_CPU:-}"\n')
    (folder / "accelerate").chmod(0o755)
    return folder


def test_on_a_node_without_gpus_accelerate_starts_every_process_on_the_cpu(accelerate_telling_its_env, tmp_path):
    """As DeepSpeed gets its CPU accelerator: `--num_processes 2` is two processes of one world,
    not accelerate's one process of world size 1 (it counts CUDA devices)."""
    for given in (["--num_processes", "2"], ["--num_processes=2"]):
        result = run(["accelerate", "launch", *given, "train.py", "--num_processes", "9"], accelerate_telling_its_env, tmp_path,
                     DS_ACCELERATOR="cpu")
        assert result.stdout.splitlines() == [
            f"accelerate launch --main_process_port=29411 --multi_gpu {' '.join(given)} train.py --num_processes 9",
            "ACCELERATE_USE_CPU=true",
        ]
        assert "accelerate: no GPUs on this node: 2 processes on the CPU (gloo)" in result.stderr
    # one process, a node with GPUs, or a mode or config file of the command's own: left as written
    for command, job in [
        (["accelerate", "launch", "--num_processes", "1", "train.py"], {"DS_ACCELERATOR": "cpu"}),
        (["accelerate", "launch", "--num_processes", "2", "train.py"], {}),
        (["accelerate", "launch", "--cpu", "--num_processes", "2", "train.py"], {"DS_ACCELERATOR": "cpu"}),
        (["accelerate", "launch", "--config_file", "fsdp.yaml", "--num_processes", "2", "train.py"], {"DS_ACCELERATOR": "cpu"}),
    ]:
        result = run(command, accelerate_telling_its_env, tmp_path, **job)
        assert "--multi_gpu" not in result.stdout and "ACCELERATE_USE_CPU=\n" in result.stdout + "\n", result.stdout


def test_a_launcher_missing_from_the_environment_says_so(tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    result = run(["deepspeed", "train.py"], empty, tmp_path)
    assert result.returncode == 127
    assert "deepspeed: not found in this job's training environment (choose a framework version that installs it)" in result.stderr


def test_a_container_s_bash_puts_the_wrappers_first(tmp_path):
    env = {"PATH": "/opt/conda/bin:/usr/bin:/bin", "SIMPLEAI_LAUNCHERS": str(LAUNCHERS_DIR),
           "BASH_ENV": str(LAUNCHERS_DIR / "bash_env.sh")}
    result = subprocess.run(["bash", "-c", 'echo "$PATH"; echo "${BASH_ENV:-unset}"'], env=env, capture_output=True, text=True)
    assert result.stdout.splitlines() == [f"{LAUNCHERS_DIR}:/opt/conda/bin:/usr/bin:/bin", "unset"]


def test_the_wrappers_are_executable():
    for name in ("deepspeed", "accelerate"):
        assert os.access(LAUNCHERS_DIR / name, os.X_OK)
