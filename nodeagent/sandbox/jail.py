"""One placement's sandbox: its Unix user, its files, its cgroup, its File Storage share, and the
launch spec the launcher reads (nodeagent/sandbox/launch.py).

Lifetime: `Jail.enter` before the command starts (the user is allocated, the working directory
handed over, the cgroup made); `finish_command` once the command has ended (the cgroup emptied,
its usage read, the group removed); `leave` after the output upload (the files handed back, the
user released). An agent that restarts finds what an earlier one left through the marker
(`marker`, `recover`).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..environment import LAUNCHERS_DIR, VENDOR_DIR
from ..fileshare import placement_share
from ..jobusers import JobIdentity
from ..protocol import Placement
from . import SandboxSettings
from .cgroups import PlacementCgroup, Usage
from .devices import deny_rules, gpu_minors
from .files import hand_back, hand_over

log = logging.getLogger(__name__)


def readable_paths(settings: SandboxSettings, env: dict[str, str]) -> list[Path]:
    """What a job reads of the node besides the system: the agent's interpreter and its venv
    (`python` on the job's PATH), the training environments, the checkpoint library, the
    launchers and the job's inputs."""
    paths = [Path(sys.base_prefix), Path(sys.prefix), Path(sys.executable), *settings.readable, VENDOR_DIR, LAUNCHERS_DIR]
    for name in ("CHECKPOINT_VENDOR", "VIRTUAL_ENV"):
        if env.get(name, "").startswith("/"):
            paths.append(Path(env[name]))
    # the inputs synced for it (nodeagent.inputs): bound read-only, like the rest of this list
    paths += [Path(value) for name, value in sorted(env.items()) if name.startswith("SIMPLEAI_INPUT_") and value.startswith("/")]
    return list(dict.fromkeys(paths))


def share_of(settings: SandboxSettings, placement: Placement, workdir: Path, output_dir: Path,
             env: dict[str, str]) -> tuple[Path, str] | None:
    """(the tenant's share on the node, the mount path inside the job), made ready, or None when
    the placement names no mount path; fileshare.FileStorageUnavailable says why it cannot be.
    The mount path may not overlap what the job's view needs of the node."""
    reserved = [workdir, output_dir, *readable_paths(settings, env)]
    return placement_share(placement, settings.file_storage_root, settings.identities.tenant_gid,
                           settings.node_name or "this node", reserved)


@dataclass
class Jail:
    settings: SandboxSettings
    placement: Placement
    workdir: Path
    output_dir: Path
    identity: JobIdentity
    home: Path
    cgroup: PlacementCgroup | None
    share: tuple[Path, str] | None
    gpu_note: str = ""
    usage: Usage | None = None
    project: Path | None = None  # the cached project tree laid under the working directory (project_view)

    @classmethod
    def enter(cls, settings: SandboxSettings, placement: Placement, workdir: Path, output_dir: Path, env: dict[str, str],
              real_gpus: bool, project: Path | None = None) -> Jail:
        """Everything the command needs before it starts (blocking: call it in a thread). Raises
        fileshare.FileStorageUnavailable (with the job log's sentence), jobusers.NoIdentityLeft
        or OSError; nothing is left held then. `project`: a cached tree the launcher lays under
        the working directory (copy-on-write) instead of a copy in it."""
        share = share_of(settings, placement, workdir, output_dir, env)
        tenant = placement.get("tenant")
        key = f"{settings.node_name}/{placement['job_id']}/{placement['attempt']}/{placement['role']}"
        identity = settings.identities.allocate(key, int(tenant["id"]) if tenant else 0)
        if not tenant:  # an older console: a group of its own, shared with no one
            identity.gid = identity.uid
        cgroup: PlacementCgroup | None = None
        try:
            home = hand_over(workdir, output_dir, identity.uid, identity.gid)
            support = settings.cgroup_support()
            if support.version:
                cgroup = support.group(f"job{identity.uid}")
                cgroup.create()
            jail = cls(settings, placement, workdir, output_dir, identity, home, cgroup, share, project=project)
            if project is not None:
                shutil.rmtree(overlay_scratch(workdir), ignore_errors=True)
                overlay_scratch(workdir).mkdir(mode=0o700)
            jail.gpu_note = jail._limit_devices(real_gpus)
            return jail
        except BaseException:
            if cgroup is not None:
                cgroup.remove(wait=0)
            with contextlib.suppress(OSError):
                hand_back(workdir, output_dir, identity.uid)
            identity.release()
            raise

    def _limit_devices(self, real_gpus: bool) -> str:
        rules = list(self.settings.extra_device_rules)
        gpus = self.placement.get("gpu_indices") or []
        minors = gpu_minors(gpus) if real_gpus else []
        if real_gpus:
            rules += deny_rules(minors)
        applied = self.cgroup is not None and self.cgroup.deny_devices(rules) if rules else False
        if not real_gpus:
            return ""
        if applied:
            return f"only its GPUs ({', '.join(f'/dev/nvidia{m}' for m in minors) or 'none'}) can be opened"
        if self.cgroup is not None and self.cgroup.version == 2:
            return "GPU device isolation not applied (under cgroup v2 it needs an eBPF program, which the agent does not load)"
        return "GPU device isolation not applied (this node has no cgroup devices controller)"

    # -- the command -------------------------------------------------------------------------
    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """The command's environment with who it runs as (no passwd entry exists for the user)."""
        return {**env, "HOME": str(self.home), "USER": self.identity.name, "LOGNAME": self.identity.name}

    def launch_spec(self, command: str, env: dict[str, str]) -> dict[str, Any]:
        """What the launcher (launch.py) reads on stdin:

            uid, gid          the placement's Unix user and group (nodeagent.jobusers)
            command, cwd, env `bash -c COMMAND` in the working directory with exactly this environment
            cgroup_procs      cgroup.procs files to join before anything else starts (one per hierarchy)
            readable          paths the job reads (interpreter, environments, vendor and launchers
                              directories): made reachable and bound read-only
            writable          paths the job writes (its working directory and HOME): made reachable
            shm_bytes         the size of its /dev/shm (null: the kernel's default, half the memory)
            share             {source, target}: the tenant's File Storage share, bound at the job's
                              mount path inside the job, or null
            project           {lower, scratch}: the cached project laid under the working directory
                              copy-on-write (project_view.py), or null
        """
        shm = self.placement.get("shm_size_gb") or 0
        return {
            "uid": self.identity.uid, "gid": self.identity.gid, "command": command, "cwd": str(self.workdir),
            "env": self.environment(env),
            "cgroup_procs": self.cgroup.procs_files() if self.cgroup else [],
            "readable": [str(path) for path in readable_paths(self.settings, env)],
            "writable": [str(path) for path in dict.fromkeys([self.workdir, self.output_dir])],
            "shm_bytes": int(shm * 2**30) if shm else None,
            "share": {"source": str(self.share[0]), "target": self.share[1]} if self.share else None,
            "project": {"lower": str(self.project), "scratch": str(overlay_scratch(self.workdir))} if self.project else None,
        }

    def describe(self) -> str:
        """The job log's "Isolation: …" line."""
        tenant = self.placement.get("tenant")
        group = (f"group of tenant {tenant.get('name') or tenant['id']}" if tenant else "a group of its own")
        parts = [
            f"runs as user {self.identity.name} (uid {self.identity.uid}, {group}, gid {self.identity.gid}), "
            "no supplementary groups, no_new_privs",
            "own PID, mount and IPC namespaces", "private /tmp, /var/tmp and /dev/shm",
            "the agent's files and other jobs' directories hidden",
        ]
        support = self.settings.cgroup_support()
        if self.cgroup is not None:
            names = [name for name in self.cgroup.controllers() if name != "cpuacct"]
            text = f"cgroup v{self.cgroup.version} ({', '.join(names)})" if names else f"cgroup v{self.cgroup.version}"
            parts.append(f"{text}; {support.note}" if support.note else text)
        else:
            parts.append(support.describe())
        if self.gpu_note:
            parts.append(self.gpu_note)
        if self.share:
            parts.append(f"File Storage at {self.share[1]}")
        if self.project:
            parts.append("the project a copy-on-write view of the node's copy")
        parts.append("the node's network (shared)")
        return ", ".join(parts)

    def marker(self) -> dict[str, Any]:
        return {"uid": self.identity.uid, "workdir": str(self.workdir), "output_dir": str(self.output_dir),
                "cgroup": self.cgroup.marker() if self.cgroup else None}

    # -- after the command -------------------------------------------------------------------
    def kill(self) -> None:
        if self.cgroup is not None:
            self.cgroup.kill()

    def finish_command(self) -> None:
        """The command has ended: nothing of it may run on; read its usage, remove its group."""
        if self.cgroup is None:
            return
        self.cgroup.kill()
        self.usage = self.cgroup.usage()
        if not self.cgroup.remove():
            log.warning("the cgroup of placement %s still holds processes; not removed", self.workdir)

    def leave(self) -> None:
        """After the output upload: the files become root's again, then the user is free."""
        try:
            hand_back(self.workdir, self.output_dir, self.identity.uid)
        except OSError:  # the user stays taken: better than handing its files to a stranger
            log.exception("could not hand the files of %s back; user %d stays reserved", self.workdir, self.identity.uid)
            return
        shutil.rmtree(overlay_scratch(self.workdir), ignore_errors=True)
        self.identity.release()


def overlay_scratch(workdir: Path) -> Path:
    """overlayfs's scratch directory for a working directory: beside it, the agent's."""
    return workdir.with_name(f"{workdir.name}.overlay")


def recover(marker: dict[str, Any], settings: SandboxSettings) -> None:
    """An earlier agent process left this placement (its command is stopped by now): remove its
    cgroup and hand its files back, from what the marker says."""
    cgroup = PlacementCgroup.from_marker(marker.get("cgroup"))
    if cgroup is not None:
        cgroup.kill()
        cgroup.remove()
    uid, workdir = marker.get("uid"), marker.get("workdir")
    # a marker is the agent's own file; still, never hand anything of a user outside the job range
    if isinstance(uid, int) and uid in settings.identities.uids and isinstance(workdir, str) and workdir:
        with contextlib.suppress(OSError):
            hand_back(Path(workdir), Path(str(marker.get("output_dir") or Path(workdir) / "output")), uid)
        shutil.rmtree(overlay_scratch(Path(workdir)), ignore_errors=True)
