"""A Training Job's Slurm request, from its rows: who it runs as, which account, what it asks for.

The thin Django side of jobs.slurm.request (plain functions): reads the job, its owner's Slurm
account and the cluster's rules, and hands them over. The submission and the admin's preview
both use `batch_spec()`, so what the admin shows is what is sent.
"""

from __future__ import annotations

import json
from typing import Any

from ..choices import LearningType
from ..models import TrainingJob
from ..scheduling.catalogue import Allocation
from . import request
from .adapters import adapter_for
from .batch_script import BatchSpec, build_batch_script, submission
from .models import SlurmAccount, SlurmCluster

PREVIEW_KEY = "<launch key: made at submission>"


def account_for(cluster: SlurmCluster, owner: Any) -> SlurmAccount | None:
    """The owner's own mapping, else their team's (the first by name), else None (the cluster's default)."""
    own = cluster.accounts.filter(user=owner).first()
    if own is not None:
        return own
    return cluster.accounts.filter(team__in=owner.groups.all()).order_by("team__name").first()


def _allocation(job: TrainingJob) -> Allocation:
    for allocation in job.server_type.allocations():
        if allocation.gpus == job.gpus_per_node:
            return allocation
    raise ValueError(f"server type {job.server_type.name} has no allocation of {job.gpus_per_node} GPUs per node")


def ask_for(job: TrainingJob, mapping: SlurmAccount | None) -> request.Ask:
    allocation = _allocation(job)
    return request.Ask(
        node_count=job.node_count, gpus_per_node=job.gpus_per_node, vcpus_per_node=allocation.vcpus,
        memory_gb_per_node=job.memory_gb, node_gpus=job.server_type.gpus_per_node,
        spot=job.learning_type == LearningType.SPOT, failover=job.failover_enabled,
        time_limit_minutes=job.time_limit_minutes, account=mapping.account if mapping else "",
    )


def batch_spec(cluster: SlurmCluster, job: TrainingJob, launch_key: str, mapping: SlurmAccount | None) -> BatchSpec:
    """Raises ValueError when the cluster's rules cannot take the job (e.g. a time limit over the maximum)."""
    resources = request.resources(ask_for(job, mapping), cluster.rules())
    return BatchSpec(
        job_id=job.pk, job_name=job.name, node_count=job.node_count, gpus_per_node=job.gpus_per_node,
        partition=resources["partition"], requeue=resources["requeue"], console_url=cluster.console_url,
        launch_key=launch_key, launcher=cluster.launcher, work_dir=cluster.work_dir, server_type=job.server_type.name,
        gpu_metrics=cluster.gpu_metrics, stop_grace_seconds=cluster.stop_grace_seconds,
        metrics_interval=cluster.metrics_interval_seconds, resources=resources,
    )


def preview(job: TrainingJob) -> str:
    """What the console sends (or sent) to Slurm for `job`: as sbatch, as the JSON slurmrestd gets, and the script."""
    cluster = SlurmCluster.objects.filter(server_type_id=job.server_type_id).first()
    if cluster is None:
        return "No Slurm cluster serves this server type: the node agents run it."
    mapping = account_for(cluster, job.owner)
    try:
        spec = batch_spec(cluster, job, PREVIEW_KEY, mapping)
    except ValueError as exc:
        return f"Slurm cluster {cluster.name} cannot take this job: {exc}"
    properties = submission(spec)
    properties["environment"] = {k: ("…" if k == "SIMPLEAI_LAUNCH_KEY" else v) for k, v in properties["environment"].items()}
    runs_as = mapping.unix_user if mapping and mapping.unix_user else cluster.user_name
    adapter = adapter_for(cluster.api_version)
    body = adapter.submit_body("", properties)["job"]
    return (f"# Slurm cluster {cluster.name}, as Unix user {runs_as}\n{request.sbatch_line(properties)}\n\n"
            f"# POST {adapter.prefix}/job/submit (job)\n{json.dumps(body, indent=2)}\n\n"
            f"# the batch script\n{build_batch_script(spec)}")


def time_limit_error(server_type: str, minutes: int | None) -> str | None:
    """Why a new job's time limit cannot be taken, or None (the job form and the API ask)."""
    if minutes is None:
        return None
    cluster = SlurmCluster.objects.filter(server_type__name=server_type).first()
    if cluster is None:
        return f"Only jobs that run on a Slurm cluster take a time limit; server type {server_type} does not."
    try:
        request.time_limit(minutes, cluster.rules())
    except ValueError as exc:
        return str(exc)
    return None
