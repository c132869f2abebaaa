"""The Slurm batch job of a Training Job: its script and its submission properties.

Plain functions over plain data (no Django, no network); `jobs.slurm.submit` feeds them from
the job and the cluster, an API adapter turns the properties into its version's JSON.

One batch job per Training Job: `-N node_count`, `gres=gpu:<GPUs per node>`, one task per
node, the partition of its learning type, requeue allowed when Slurm may start it again (spot
preemption, node failure with Job Failover). The script runs one step: `srun` starts the
node-side step launcher (`nodeagent.slurm_step`) once on every allocated node, while the batch
step redeems the job's launch key for this run's token, which reaches them on srun's standard
input. Slurm runs the same script again after a requeue; the launch key then buys a token for
the new run.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# What a job's name in Slurm starts with: the console finds its own jobs (and adopts one it
# submitted but could not record) by this prefix and the Training Job's id.
NAME_PREFIX = "simpleai-"
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class BatchSpec:
    job_id: int
    job_name: str
    node_count: int
    gpus_per_node: int
    partition: str
    requeue: bool
    console_url: str  # how the nodes reach the console (http://host:port)
    launch_key: str  # job-scoped secret; redeemed by the batch step for one run's token
    launcher: str  # command line that starts nodeagent.slurm_step on a node
    work_dir: str  # node-local directory for the launchers' spools and the jobs' working directories
    server_type: str
    gpu_metrics: str  # auto | simulated | off: how the launcher samples GPUs for the Monitoring tab
    stop_grace_seconds: int  # SIGTERM → this long → SIGKILL, inside Slurm's KillWait
    metrics_interval: int = 10  # seconds between the launcher's GPU/node samples (0: none)
    # the whole resource request (jobs.slurm.request.resources): memory, CPUs, GRES, time limit, …;
    # it wins over the shape above, which alone makes a minimal request
    resources: Mapping[str, Any] = field(default_factory=dict)


def slurm_job_name(job_id: int, job_name: str) -> str:
    return f"{NAME_PREFIX}{job_id}-{job_name}"


def job_comment(job_id: int, console_url: str) -> str:
    """The Slurm job's comment: which console submitted it, so the reconciliation of one console
    never cancels another's jobs on a shared cluster."""
    return f"Simple AI Training job {job_id} (via {console_url})"


def comment_is_from(comment: str, console_url: str) -> bool:
    return comment.startswith("Simple AI Training job ") and comment.endswith(f"(via {console_url})")


def job_id_from_name(name: str) -> int | None:
    """The Training Job id in a Slurm job name this console gave, else None."""
    if not name.startswith(NAME_PREFIX):
        return None
    number, _, _ = name[len(NAME_PREFIX):].partition("-")
    return int(number) if number.isdigit() else None


def launcher_words(launcher: str) -> list[str]:
    """The launcher command line as words; raises ValueError for an empty or unbalanced one."""
    words = shlex.split(launcher)
    if not words:
        raise ValueError("the launcher command is empty")
    return words


def build_batch_script(spec: BatchSpec) -> str:
    launcher = shlex.join(launcher_words(spec.launcher))
    run = shlex.join([
        "run", "--work-dir", spec.work_dir, "--grace", str(spec.stop_grace_seconds),
        "--gpus", spec.gpu_metrics, "--server-type", spec.server_type, "--metrics-interval", str(spec.metrics_interval),
    ])
    return f"""#!/bin/bash
# Simple AI Training job {spec.job_id} ({spec.job_name}); built by jobs.slurm.batch_script.
# One step with one task per allocated node: the step launcher runs the job's command there and
# ships its lines to the console. Slurm runs this script again when it requeues the job.
set -u
echo "[simpleai] Slurm job $SLURM_JOB_ID on $SLURM_JOB_NODELIST, restart ${{SLURM_RESTART_COUNT:-0}}" >&2
# The job's launch key buys a token for this run (attempt) only, redeemed while srun starts the
# launchers (they load their modules meanwhile): it reaches every task on srun's standard input
# (--input=all), read once; a launcher that reads no token exits at once. The tasks never see the key.
exec 3< <({launcher} token)
unset SIMPLEAI_LAUNCH_KEY
# srun no longer inherits --cpus-per-task from the batch job (Slurm 22.05): pass it on, or the
# launcher's step is bound to one CPU where task/affinity or task/cgroup binds CPUs
exec srun --input=all --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \\
    ${{SLURM_CPUS_PER_TASK:+--cpus-per-task=$SLURM_CPUS_PER_TASK}} --kill-on-bad-exit=1 --mpi=none {launcher} {run} <&3 3<&-
"""


def environment(spec: BatchSpec) -> dict[str, str]:
    """The batch job's whole environment (a job submitted over REST inherits nothing)."""
    return {
        "PATH": BASE_PATH,
        "LANG": "C.UTF-8",
        "SIMPLEAI_CONSOLE_URL": spec.console_url,
        "SIMPLEAI_JOB_ID": str(spec.job_id),
        "SIMPLEAI_LAUNCH_KEY": spec.launch_key,
    }


def submission(spec: BatchSpec) -> dict[str, Any]:
    """Version-neutral job properties; the API adapter renames what its version names differently."""
    return {**(spec.resources or _shape(spec)), **_identity(spec)}


def _shape(spec: BatchSpec) -> dict[str, Any]:
    return {
        "nodes": spec.node_count,
        "tasks_per_node": 1,
        "gres": f"gpu:{spec.gpus_per_node}",
        "partition": spec.partition,
        "requeue": spec.requeue,
    }


def _identity(spec: BatchSpec) -> dict[str, Any]:
    return {
        "name": slurm_job_name(spec.job_id, spec.job_name),
        "comment": job_comment(spec.job_id, spec.console_url),
        "current_working_directory": spec.work_dir,
        "standard_output": f"{spec.work_dir.rstrip('/')}/slurm-%j.out",
        "environment": environment(spec),
    }
