"""File Storage on a node: the operator's share, one directory per tenant, and the mount path.

The operator declares where File Storage lives on the node (`--file-storage-root DIR`, typically a
network file system every node mounts at the same place). A tenant's share is `DIR/<tenant id>`:
made by the agent when missing, owned by the agent's user, group-owned by the tenant's group
(nodeagent.jobusers), setgid (what a job creates in it stays in the tenant's group) and mode
2770 (the tenant's jobs read and write it; nobody else can enter it). A job's "File Storage
volume mount path" names where that share appears *inside* the job (a container's bind mount,
or a bind mount in the job's own mount namespace): it never names a path of the node.

Both runtimes use the functions here (`placement_share` is the two others for one placement,
with the job log's messages); no Django, no runtime imports.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Callable, Iterable
from pathlib import Path, PurePath

from .protocol import Placement

MAX_MOUNT_PATH = 255  # the console's limit on the field
SHARE_MODE = 0o2770
# Directories the job's own system needs (its loader, libraries, configuration, devices, /proc):
# a share there would break the image or, for the process runtime, let a tenant's files stand
# in for the system's. Their ancestors are refused too (a share at /var would hide /var/run).
# where the platform's own mounts appear inside a job (nodeagent.runtimes.container_spec): no share there
PLATFORM_ROOT = "/simpleai"
SYSTEM_PATHS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin",
                "/sys", "/usr", "/var/run")


def check_mount_path(path: str, reserved: Iterable[str | PurePath] = ()) -> str:
    """The job's mount path, normalised (no trailing slash); ValueError with a sentence for the
    user when it cannot be used. `reserved`: paths the runtime itself uses inside the job (its
    working directory, OUTPUT_DIR, the checkpoint library): the share may not be one of them,
    inside one, or above one."""
    if not isinstance(path, str) or not path:
        raise ValueError("Enter the File Storage mount path, e.g. /mnt/data.")
    if any(ord(char) < 32 or ord(char) == 127 for char in path):
        raise ValueError("The File Storage mount path may not contain control characters.")
    if len(path) > MAX_MOUNT_PATH:
        raise ValueError(f"The File Storage mount path may be at most {MAX_MOUNT_PATH} characters long.")
    if not path.startswith("/"):
        raise ValueError(f"Enter an absolute path for the File Storage mount path, e.g. /mnt/data (not {path!r}).")
    normal = path.rstrip("/") or "/"
    # normpath keeps a leading '//' (POSIX lets it mean something else): refused with '..' and '.'
    if path.startswith("//") or posixpath.normpath(path) != normal:
        raise ValueError(f"Enter a normalised absolute path without '.', '..' or '//' for the File Storage mount path, "
                         f"e.g. /mnt/data (not {path!r}).")
    if normal == "/":
        raise ValueError("File Storage cannot be mounted at the root directory; use a path such as /mnt/data.")
    for system in SYSTEM_PATHS:
        if _overlaps(normal, system):
            raise ValueError(f"{normal} is a system directory of the job's own file system ({system}); "
                             "mount File Storage elsewhere, e.g. /mnt/data.")
    for used in reserved:
        if _overlaps(normal, str(used)):
            raise ValueError(f"{normal} overlaps {used}, which the platform mounts inside the job; "
                             "mount File Storage elsewhere, e.g. /mnt/data.")
    return normal


def _overlaps(path: str, other: str) -> bool:
    """Whether one of the two is the other or lies inside it."""
    return path == other or path.startswith(f"{other}/") or other.startswith(f"{path}/")


def tenant_share(root: Path, tenant_id: int, gid: int) -> Path:
    """`root/<tenant id>`, made if missing, owned by this process's user and the tenant's group,
    setgid, mode 2770 (set again each time: an operator's copy or a restore may have changed it).

    The share itself is opened without following a symbolic link and changed through that
    descriptor, so nothing placed at its name can turn the chown/chmod onto another path.
    OSError when the root or the share cannot be made or changed (the agent needs root, or
    CAP_CHOWN, to hand a directory to a group it is not in)."""
    if isinstance(tenant_id, bool) or not isinstance(tenant_id, int) or tenant_id <= 0:
        raise ValueError(f"a tenant id is a positive integer, not {tenant_id!r}")
    # the root: only the agent writes it (tenants could otherwise plant a share's name)
    root.mkdir(mode=0o711, parents=True, exist_ok=True)
    share = root / str(tenant_id)
    with contextlib.suppress(FileExistsError):
        os.mkdir(share, 0o700)  # 0700 until its group and mode are set below
    descriptor = os.open(share, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        found = os.fstat(descriptor)
        if (found.st_uid, found.st_gid) != (os.geteuid(), gid):
            os.fchown(descriptor, os.geteuid(), gid)
        os.fchmod(descriptor, SHARE_MODE)  # after the chown, which clears the setgid bit
    finally:
        os.close(descriptor)
    return share


class FileStorageUnavailable(Exception):
    """A placement names a File Storage mount path this node cannot serve; the message is for
    the job's log (and, through the exit report, its status reason)."""


def placement_share(placement: Placement, root: Path | None, tenant_gid: Callable[[int], int], node: str,
                    reserved: Iterable[str | PurePath] = ()) -> tuple[Path, str] | None:
    """(the tenant's share on this node, where it appears inside the job) for a placement that
    names a mount path, made ready; None for one that names none. FileStorageUnavailable says
    why it cannot be mounted: a path that is not a plain one, an agent without
    --file-storage-root, a console that did not say whose job it is, a share that could not be made."""
    path = placement.get("mount_path") or ""
    if not path:
        return None
    try:
        target = check_mount_path(path, reserved)
    except ValueError as refused:
        hint = ""
        if (path.rstrip("/") == "/root" or path.startswith("/home/")) and "overlaps" in str(refused):
            # the seed's /root holds ~/.cache/huggingface; the cache works from any mount path
            hint = (f" A Hugging Face cache kept in File Storage works from any mount path: mount it at /mnt/data and "
                    f"set HF_HOME=/mnt/data/.cache/huggingface in the job's environment (or use the Docker runtime, "
                    f"where {path.rstrip('/')} is the container's own).")
        raise FileStorageUnavailable(f"File Storage cannot be mounted on {node}: {refused}{hint}") from None
    if root is None:
        raise FileStorageUnavailable(
            f"File Storage is not available on {node}: the job mounts it at {target}, and this node's agent runs "
            "without --file-storage-root (its operator has declared no File Storage here)")
    tenant = placement.get("tenant")
    if not tenant:
        raise FileStorageUnavailable(f"File Storage cannot be mounted on {node}: the console did not say whose job "
                                     "this is (a console older than this agent)")
    try:
        share = tenant_share(root, tenant["id"], tenant_gid(tenant["id"]))
    except (OSError, ValueError) as exc:
        raise FileStorageUnavailable(f"File Storage of {tenant.get('name') or tenant['id']} could not be prepared on "
                                     f"{node}: {exc}") from None
    return share, target
