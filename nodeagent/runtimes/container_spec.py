"""What a job's container is made of: its user, its privileges, its mounts and its environment.

A container holds nothing of the node but what its job needs, at fixed paths under /simpleai
(the node's own layout, e.g. the agent's work directory, is never shown to the job):

    /simpleai/work          the attempt's working directory (read-write; the command's cwd)
    /simpleai/work/output   OUTPUT_DIR (read-write; uploaded by the agent after the exit)
    /simpleai/work/.home    HOME (the image's own home is seldom writable by the job's user)
    /simpleai/vendor        CHECKPOINT_VENDOR, the checkpoint library (read-only)
    /simpleai/launchers     the deepspeed/accelerate wrappers (read-only)
    /simpleai/inputs/<NAME> each input synced for the job ($SIMPLEAI_INPUT_<NAME>; read-only)
    /simpleai/requirements  the project's requirements.txt installed for the image (PYTHONUSERBASE; read-only)
    <mount path>            the tenant's File Storage share (read-write), when the job names one

It runs as the placement's own Unix user and its tenant's group (nodeagent.jobusers), never
root, with every capability dropped and `no-new-privileges` (no set-uid program can raise it
again). The agent hands the working directory to that user before the start and takes it back
once the container is gone (`hand_over`, `hand_back`), so the user can be handed to another
placement afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from ..environment import LAUNCHERS_DIR, VENDOR_DIR
from ..fileshare import PLATFORM_ROOT
from ..jobusers import JobIdentity
from ..protocol import Placement
from ..sandbox.files import HOME_NAME, give_tree, take_tree_back
from .base import LaunchSpec

LABEL_PREFIX = "simpleai."
CONTAINER_ROOT = PurePosixPath(PLATFORM_ROOT)
WORKDIR_IN_CONTAINER = CONTAINER_ROOT / "work"
OUTPUT_IN_CONTAINER = CONTAINER_ROOT / "output"  # only when OUTPUT_DIR is not inside the working directory
VENDOR_IN_CONTAINER = CONTAINER_ROOT / "vendor"
LAUNCHERS_IN_CONTAINER = CONTAINER_ROOT / "launchers"
INPUTS_IN_CONTAINER = CONTAINER_ROOT / "inputs"
REQUIREMENTS_IN_CONTAINER = CONTAINER_ROOT / "requirements"  # PYTHONUSERBASE (runtimes.docker_requirements)
# what the job's files get: its tenant's other jobs (the same group) may change them in the share
JOB_UMASK = "0007"


def container_name(placement: Placement) -> str:
    return f"simpleai-job{placement['job_id']}-attempt{placement['attempt']}-{placement['role']}"


def container_labels(placement: Placement, node_name: str) -> dict[str, str]:
    return {
        f"{LABEL_PREFIX}node": node_name,
        f"{LABEL_PREFIX}job": str(placement["job_id"]),
        f"{LABEL_PREFIX}job-name": placement["job_name"],
        f"{LABEL_PREFIX}attempt": str(placement["attempt"]),
        f"{LABEL_PREFIX}role": placement["role"],
    }


def places(spec: LaunchSpec, vendor_dir: Path = VENDOR_DIR) -> list[tuple[Path, PurePosixPath, bool]]:
    """(node path, container path, read-only) of each node directory the container sees, the
    most specific first (OUTPUT_DIR before the working directory that holds it)."""
    found: list[tuple[Path, PurePosixPath, bool]] = []
    if not spec.output_dir.is_relative_to(spec.workdir):
        found.append((spec.output_dir, OUTPUT_IN_CONTAINER, False))
    found += [
        (spec.workdir, WORKDIR_IN_CONTAINER, False),  # the script in, OUTPUT_DIR out
        (vendor_dir, VENDOR_IN_CONTAINER, True),  # CHECKPOINT_VENDOR
        (LAUNCHERS_DIR, LAUNCHERS_IN_CONTAINER, True),  # deepspeed/accelerate wrappers
    ]
    if spec.requirements is not None:
        found.append((spec.requirements, REQUIREMENTS_IN_CONTAINER, True))
    for name, path in spec.inputs:  # a file (one object) keeps its name; a tree is the directory
        inside = INPUTS_IN_CONTAINER / name.upper()
        found.append((path, inside / path.name if path.is_file() else inside, True))
    return found


def in_container(value: str, mapping: list[tuple[Path, PurePosixPath, bool]]) -> str:
    """A value of the environment that names a node directory the container sees, as the
    container sees it (OUTPUT_DIR, CHECKPOINT_VENDOR, BASH_ENV, ...); any other value unchanged."""
    for node_path, container_path, _ in sorted(mapping, key=lambda place: -len(str(place[0]))):  # the most specific
        prefix = str(node_path)
        if value == prefix:
            return str(container_path)
        if value.startswith(f"{prefix}/"):
            return f"{container_path}{value[len(prefix):]}"
    return value


def container_environment(env: Mapping[str, str], mapping: list[tuple[Path, PurePosixPath, bool]],
                          user: JobIdentity) -> dict[str, str]:
    """The contract as the container sees it, and who it runs as (no passwd entry exists for the
    job's user: USER, LOGNAME and HOME are what getpass, pip, torch and the others read)."""
    translated = {key: in_container(value, mapping) for key, value in env.items()}
    translated.update(HOME=str(WORKDIR_IN_CONTAINER / HOME_NAME), USER=user.name, LOGNAME=user.name)
    return translated


def build_run_kwargs(spec: LaunchSpec, real_gpus: bool, node_name: str = "", vendor_dir: Path = VENDOR_DIR, *,
                     user: JobIdentity, share: tuple[Path, str] | None = None) -> dict[str, Any]:
    """The keyword arguments of `client.containers.run` for one placement (pure: unit-tested).

    `user` is the placement's Unix identity; `share` is (the tenant's share on the node, the
    mount path inside the container), from fileshare.placement_share."""
    from docker.types import DeviceRequest, Mount

    placement = spec.placement
    if placement.get("mount_path") and share is None:
        raise ValueError("a placement with a File Storage mount path needs its tenant's share")
    mapping = places(spec, vendor_dir)
    mounts = [Mount(str(inside), str(node), type="bind", read_only=read_only) for node, inside, read_only in mapping]
    if share is not None:
        mounts.append(Mount(share[1], str(share[0]), type="bind", read_only=False))
    kwargs: dict[str, Any] = {
        "image": placement["image"],
        # the umask on the same line: the command's own line numbers stay as the user wrote them
        "command": ["bash", "-c", f"umask {JOB_UMASK}; {placement['command']}"],
        "name": container_name(placement),
        "environment": container_environment(spec.env, mapping, user),
        "working_dir": str(WORKDIR_IN_CONTAINER),
        "mounts": mounts,
        "user": f"{user.uid}:{user.gid}",
        "security_opt": ["no-new-privileges"],
        "cap_drop": ["ALL"],
        "privileged": False,
        # NCCL and torch.distributed reach the other nodes at MASTER_ADDR:MASTER_PORT and on ports
        # of their own choosing: the node's network (docs/operator/security.md says what a job can
        # reach through it)
        "network_mode": "host",
        # an init as PID 1 passes the stop signal on (bash as PID 1 would ignore SIGTERM, so
        # every stop would last the whole grace period) and reaps the command's children
        "init": True,
        "labels": container_labels(placement, node_name),
        "detach": True,
    }
    if placement.get("shm_size_gb"):
        kwargs["shm_size"] = f"{placement['shm_size_gb']}g"
    if real_gpus and placement["gpu_indices"]:
        # inside the container the GPUs are renumbered from 0: no CUDA_VISIBLE_DEVICES needed
        kwargs["device_requests"] = [DeviceRequest(
            device_ids=[str(index) for index in placement["gpu_indices"]], capabilities=[["gpu"]],
        )]
    return kwargs


# -- the working directory: the job's user's while its container lives ------------------------

def hand_over(workdir: Path, output_dir: Path, uid: int, gid: int) -> None:
    """Give the working directory, OUTPUT_DIR and a fresh HOME to the job's user before the start;
    a file hard-linked from the warm pool's kept copy stays the agent's (give_tree)."""
    give_tree(workdir, output_dir, uid, gid, kept_readable=False)


def hand_back(workdir: Path, output_dir: Path, uid: int) -> None:
    """Once the container is gone: everything the job's user owns there becomes the agent's again
    (links themselves, not what they point at), so that user can serve another placement."""
    take_tree_back(workdir, output_dir, uid, (os.geteuid(), os.getegid()), keep_linked_files=False)
