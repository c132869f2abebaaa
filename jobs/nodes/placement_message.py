"""The placement message (nodeagent.protocol.Placement): built here for both backends, the
node agents' desired state (jobs.nodes.registry) and a Slurm step launcher's (jobs.slurm.steps).

Read as plain values in one query (`COLUMNS`, on Placement): a scheduler run pushes the desired
state of a thousand nodes at once, and building model instances per placement was most of its
cost. What a placement carries of object storage is the attempt's own credentials
(jobs.storage.credentials), never the console's keys.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from console.lib import crypto
from nodeagent import protocol

from ..storage.credentials import placement_storage
from ..storage.objectstore import output_prefix
from ..validation import workdir_sha256

COLUMNS = (
    "node_id", "role", "node_rank", "gpu_indices", "attempt__number", "attempt__master_addr", "attempt__master_port",
    "attempt__resume_step", "attempt__job_id", "attempt__job__name", "attempt__job__node_count",
    "attempt__job__gpus_per_node", "attempt__job__command", "attempt__job__script_url", "attempt__job__image_url",
    "attempt__job__registry_username", "attempt__job__registry_password_encrypted", "attempt__job__shm_size_gb",
    "attempt__job__volume_mount_path", "attempt__job__framework", "attempt__job__framework_version",
    "attempt__job__owner_id", "attempt__job__owner__username", "attempt__storage_access_key",
    "attempt__storage_secret_encrypted", "attempt__job__workdir_url", "attempt__job__inputs",
)


def rows(placements: Any) -> Any:
    """The placements' values, one named row each (`build` reads them)."""
    return placements.values_list(*COLUMNS, named=True)


def build(row: Any, *, grace: float, with_registry: bool = True) -> protocol.Placement:
    """One row of `rows` as the message; `grace` is the stop grace (SIGTERM → SIGKILL). A Slurm
    step has no registry (its process runtime pulls no image)."""
    job_id, owner_id, number = row.attempt__job_id, row.attempt__job__owner_id, row.attempt__number
    storage, env = placement_storage(job_id, owner_id, row.attempt__storage_access_key,
                                     row.attempt__storage_secret_encrypted)
    username = row.attempt__job__registry_username
    placement = protocol.Placement(
        job_id=job_id, job_name=row.attempt__job__name, attempt=number, role=row.role, node_rank=row.node_rank,
        nnodes=row.attempt__job__node_count, nproc_per_node=row.attempt__job__gpus_per_node,
        master_addr=row.attempt__master_addr, master_port=row.attempt__master_port, gpu_indices=list(row.gpu_indices),
        command=row.attempt__job__command, script_url=row.attempt__job__script_url, image=row.attempt__job__image_url,
        registry={"username": username, "password": crypto.decrypt(row.attempt__job__registry_password_encrypted)}
        if username and with_registry else None,
        shm_size_gb=row.attempt__job__shm_size_gb, mount_path=row.attempt__job__volume_mount_path,
        output_prefix=output_prefix(owner_id, job_id, number), resume_step=row.attempt__resume_step,
        stop_grace_seconds=grace, env=env,
        tenant=protocol.Tenant(id=owner_id, name=row.attempt__job__owner__username),
    )
    if storage is not None:
        placement["storage"] = storage
    if row.attempt__job__workdir_url:
        placement["workdir"] = protocol.Workdir(url=row.attempt__job__workdir_url,
                                                sha256=workdir_sha256(row.attempt__job__workdir_url))
    if settings.PARTIAL_RECOVERY and number > 1:
        placement["reuse_previous"] = True  # jobs.scheduling.regang kept this node's rank when it could
    if row.attempt__job__inputs:
        placement["inputs"] = [protocol.InputSpec(name=i["name"], url=i["url"]) for i in row.attempt__job__inputs]
    return placement
