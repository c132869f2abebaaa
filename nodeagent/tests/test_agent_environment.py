"""The training environment contract (DESIGN.md, "Contracts")."""

from __future__ import annotations

from pathlib import Path

from nodeagent.environment import VENDOR_DIR, training_environment
from nodeagent.tests.agent_support import make_placement


def test_it_sets_the_whole_contract_for_a_worker():
    placement = make_placement(
        node_rank=2, role="worker-2", nnodes=3, nproc_per_node=8, master_addr="10.0.0.5", master_port=29400,
        gpu_indices=[0, 1, 2, 3, 4, 5, 6, 7], attempt=4, job_name="llama", env={"MY_SETTING": "x"},
    )
    env = training_environment(placement, output_dir=Path("/w/out"))
    assert env == {
        "PET_NNODES": "3", "PET_NODE_RANK": "2", "PET_NPROC_PER_NODE": "8",
        "PET_MASTER_ADDR": "10.0.0.5", "PET_MASTER_PORT": "29400",
        "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29400", "NNODES": "3", "NODE_RANK": "2", "GPUS_PER_NODE": "8",
        "CHECKPOINT_VENDOR": str(VENDOR_DIR), "JOB_NAME": "llama", "JOB_ATTEMPT": "4", "OUTPUT_DIR": "/w/out",
        "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "MY_SETTING": "x",
        # a plain `python train.py` on each node joins one world of one process per node
        "WORLD_SIZE": "3", "RANK": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
    }


def test_a_single_node_job_gets_no_world_of_its_own():
    inherited = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}  # left in the agent's shell
    env = training_environment(make_placement(nnodes=1), output_dir=Path("/o"), base=inherited)
    assert not {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"} & env.keys()


def test_cpu_nodes_tell_deepspeed_to_use_the_cpu():
    assert training_environment(make_placement(), output_dir=Path("/o"), cpu_node=True)["DS_ACCELERATOR"] == "cpu"
    assert "DS_ACCELERATOR" not in training_environment(make_placement(), output_dir=Path("/o"))


def test_the_vendor_directory_is_the_package_s_own():
    assert Path(__file__).resolve().parents[1] / "vendor" == VENDOR_DIR
    assert VENDOR_DIR.is_absolute()


def test_ckpt_last_step_only_when_resuming():
    assert training_environment(make_placement(resume_step=1200), output_dir=Path("/o"))["CKPT_LAST_STEP"] == "1200"
    assert training_environment(make_placement(resume_step=0), output_dir=Path("/o"))["CKPT_LAST_STEP"] == "0"
    inherited = {"CKPT_LAST_STEP": "99"}  # left in the agent's shell: must not mean "resume"
    assert "CKPT_LAST_STEP" not in training_environment(make_placement(resume_step=None), output_dir=Path("/o"), base=inherited)


def test_cuda_visible_devices_only_for_real_gpus():
    placement = make_placement(gpu_indices=[2, 3])
    assert training_environment(placement, output_dir=Path("/o"), cuda_visible_devices=True)["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert "CUDA_VISIBLE_DEVICES" not in training_environment(placement, output_dir=Path("/o"))


def test_it_passes_only_the_allow_list_of_the_agent_s_environment():
    base = {
        "PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC", "TERM": "xterm", "HOME": "/root",
        "USER": "root", "NODEAGENT_TOKEN": "t", "DATABASE_URL": "postgres://postgres@db/x", "REDIS_URL": "redis://r",
        "SECRET_KEY": "s", "FIELD_ENCRYPTION_KEY": "f", "S3_SECRET_KEY": "s", "PYTHONPATH": "/opt/agent",
        "LD_PRELOAD": "/x.so", "TMPDIR": "/var/agent-tmp",
    }
    env = training_environment(make_placement(), output_dir=Path("/o"), base=base)
    assert env["PATH"].endswith(":/usr/bin")
    inherited = {key: env[key] for key in ("LANG", "LC_ALL", "TZ", "TERM")}
    assert inherited == {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC", "TERM": "xterm"}
    assert env["TMPDIR"] == "/tmp"  # the placement's private one, not the agent's
    assert not {"NODEAGENT_TOKEN", "DATABASE_URL", "REDIS_URL", "SECRET_KEY", "FIELD_ENCRYPTION_KEY", "S3_SECRET_KEY",
                "PYTHONPATH", "LD_PRELOAD", "HOME", "USER"} & env.keys()  # HOME and USER: the runtime's, per placement


def test_the_operator_passes_more_names_by_name_or_prefix():
    base = {"PATH": "/usr/bin", "HTTP_PROXY": "http://proxy:3128", "NCCL_IB_HCA": "mlx5", "NCCL_DEBUG": "INFO", "SECRET_KEY": "s"}
    env = training_environment(make_placement(), output_dir=Path("/o"), base=base, pass_env=("HTTP_PROXY", "NCCL_*"))
    assert (env["HTTP_PROXY"], env["NCCL_IB_HCA"], env["NCCL_DEBUG"]) == ("http://proxy:3128", "mlx5", "INFO")
    assert "SECRET_KEY" not in env


def test_the_placement_s_own_variables_reach_the_command():
    env = training_environment(make_placement(env={"S3_ACCESS_KEY": "attempt-key"}), output_dir=Path("/o"), base={"PATH": "/bin"})
    assert env["S3_ACCESS_KEY"] == "attempt-key"  # the attempt's own credentials (the console mints them)


def test_the_contract_wins_over_the_job_s_own_variables():
    env = training_environment(make_placement(env={"MASTER_PORT": "1", "EXTRA": "y"}), output_dir=Path("/o"))
    assert env["MASTER_PORT"] == "29500" and env["EXTRA"] == "y"


def test_the_agents_own_python_comes_first_on_path_under_the_process_runtime():
    import sys

    env = training_environment(make_placement(), output_dir=Path("/tmp/out"), base={"PATH": "/usr/bin:/bin"})
    assert env["PATH"].split(":") == [str(Path(sys.executable).parent), "/usr/bin", "/bin"]
    assert "PATH" not in training_environment(make_placement(), output_dir=Path("/tmp/out"), base=None)
