"""The training process's environment: one pure function, the contract of DESIGN.md."""

from __future__ import annotations

import os
import sys
from collections.abc import Collection, Mapping
from pathlib import Path

from .protocol import Placement

# The directory that makes the concurrent checkpointing library importable
# (`PYTHONPATH=$CHECKPOINT_VENDOR python train.py`); found from this package, not configured.
VENDOR_DIR = Path(__file__).resolve().parent / "vendor"
# The platform's `deepspeed` and `accelerate` wrappers (multi-node without ssh), first on PATH.
LAUNCHERS_DIR = Path(__file__).resolve().parent / "launchers"

# What the process runtime's command takes from the agent's environment: an allow-list, never a
# deny-list. The agent's environment holds what only the agent may know (its token, and under
# `make run` DATABASE_URL, REDIS_URL, SECRET_KEY, ...): a name no one thought to strip would leak.
# The operator adds names with --pass-env (PassEnv).
INHERITED_VARIABLES = frozenset({"PATH", "LANG", "TZ", "TERM"})
INHERITED_PREFIXES = ("LC_",)


def inherited(base: Mapping[str, str], pass_env: Collection[str] = ()) -> dict[str, str]:
    """The part of `base` (the agent's environment) a command may see: the allow-list, plus the
    operator's --pass-env names (`NAME`, or `PREFIX*` for every name that starts with PREFIX)."""
    names = INHERITED_VARIABLES | {name for name in pass_env if not name.endswith("*")}
    prefixes = INHERITED_PREFIXES + tuple(name[:-1] for name in pass_env if name.endswith("*"))
    return {key: value for key, value in base.items() if key in names or key.startswith(prefixes)}


def training_environment(
    placement: Placement,
    *,
    output_dir: Path,
    base: Mapping[str, str] | None = None,
    cuda_visible_devices: bool = False,
    cpu_node: bool = False,
    vendor_dir: Path = VENDOR_DIR,
    pass_env: Collection[str] = (),
) -> dict[str, str]:
    """Everything the command sees.

    `base` is the agent's own environment under the process runtime, of which the command gets
    only the allow-list (`inherited`: PATH, LANG, LC_*, TZ, TERM and the `pass_env` names), and
    TMPDIR=/tmp (its private /tmp); the runtime adds HOME, USER and LOGNAME (the placement's own
    directory and user). The Docker runtime passes no `base`: the image brings its own. The contract wins over `placement.env` so a job cannot break its own
    rendezvous by accident.
    `cuda_visible_devices` is set only for real GPUs under the process runtime: in a
    container the allocated GPUs are renumbered from 0 by the device request. On a
    `cpu_node` (simulated GPUs) DeepSpeed is told to use the CPU (DS_ACCELERATOR=cpu; its CPU
    accelerator then talks gloo when oneCCL is not installed).
    """
    env = inherited(base, pass_env) if base is not None else {}
    if base is not None:
        env["TMPDIR"] = "/tmp"  # the placement's own (nodeagent.sandbox); not an inherited one
        # the node's Python environment (the agent's own) comes first, so `python`, `torchrun`
        # and `deepspeed` in a command resolve to it even when the agent runs from a venv
        # that was not activated
        interpreter_bin = str(Path(sys.executable).parent)
        rest = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p != interpreter_bin]
        env["PATH"] = os.pathsep.join([interpreter_bin, *rest])
    env.update(placement.get("env") or {})
    gpus_per_node = len(placement["gpu_indices"]) or placement["nproc_per_node"]
    contract = {
        "PET_NNODES": placement["nnodes"],
        "PET_NODE_RANK": placement["node_rank"],
        "PET_NPROC_PER_NODE": placement["nproc_per_node"],
        "PET_MASTER_ADDR": placement["master_addr"],
        "PET_MASTER_PORT": placement["master_port"],
        "MASTER_ADDR": placement["master_addr"],
        "MASTER_PORT": placement["master_port"],
        "NNODES": placement["nnodes"],
        "NODE_RANK": placement["node_rank"],
        "GPUS_PER_NODE": gpus_per_node,
        "CHECKPOINT_VENDOR": vendor_dir,
        "JOB_NAME": placement["job_name"],
        "JOB_ATTEMPT": placement["attempt"],
        "OUTPUT_DIR": output_dir,
        "HF_DATASETS_OFFLINE": 1,
        "PYTHONUNBUFFERED": 1,  # lines reach the log stream as they are printed
    }
    if placement["nnodes"] > 1:
        # a plain `python train.py` on every node joins one world of one process per node
        # (init_process_group reads these); torchrun, deepspeed and accelerate set their own
        # values for the workers they start. Not set on one node: there a Trainer or
        # Accelerator would start a distributed group of one for nothing.
        contract.update(WORLD_SIZE=placement["nnodes"], RANK=placement["node_rank"], LOCAL_RANK=0, LOCAL_WORLD_SIZE=1)
    else:
        for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            env.pop(key, None)  # inherited from the agent's shell, they would mean "distributed"
    if cpu_node:
        contract["DS_ACCELERATOR"] = "cpu"
    env.update({key: str(value) for key, value in contract.items()})
    if placement.get("resume_step") is not None:
        env["CKPT_LAST_STEP"] = str(placement["resume_step"])
    else:
        env.pop("CKPT_LAST_STEP", None)  # a stale value from the agent's shell would mean "resume"
    if cuda_visible_devices:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(index) for index in placement["gpu_indices"])
    return env
