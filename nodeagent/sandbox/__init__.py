"""The process runtime's sandbox: what a placement's command can reach on the node.

Each placement runs as a Unix user of its own (nodeagent.jobusers; never root, never the
agent's user) in its tenant's group, with no supplementary groups, `no_new_privs` and umask 007,
in its own PID, mount and IPC namespaces (nodeagent/sandbox/launch.py, a small init run as root),
with a fresh /proc, a private /tmp, /var/tmp and /dev/shm, the directories it needs reachable
and read-only where it only reads them, the tenant's File Storage share at its mount path, and a
cgroup of its own where the node has one (nodeagent.sandbox.cgroups; on GPU nodes only its own
/dev/nvidia<N>). The network is the node's (rendezvous and NCCL need it).

Modules:
  launch.py   the launcher (standard library only: it runs before anything is dropped)
  cgroups.py  detection, one group per placement, kill, usage
  devices.py  which GPU device nodes a placement may open
  files.py    the agent's state root-only; a working directory handed to the job and back
  jail.py     one placement's sandbox, put together from the above (used by runtimes/process.py)

Imports: the standard library, nodeagent.jobusers, nodeagent.fileshare, nodeagent.protocol.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..jobusers import IdentityPool
from .cgroups import CgroupSupport, detect

LAUNCHER = Path(__file__).resolve().parent / "launch.py"
PROJECT_VIEW = Path(__file__).resolve().parent / "project_view.py"
log = logging.getLogger(__name__)


@dataclass
class SandboxSettings:
    """What the node's sandbox is made of (one per agent)."""

    identities: IdentityPool = field(default_factory=IdentityPool)
    file_storage_root: Path | None = None
    readable: tuple[Path, ...] = ()  # more directories jobs read (the training environment cache)
    node_name: str = ""
    cgroups: CgroupSupport | None = None  # None: detected on first use
    # devices.deny rules added to every placement's (tests: a harmless device such as /dev/full)
    extra_device_rules: tuple[str, ...] = ()

    def cgroup_support(self) -> CgroupSupport:
        if self.cgroups is None:
            self.cgroups = detect()
        return self.cgroups


def why_unconfined() -> str:
    """What a job's log says when the agent runs it without a sandbox (--no-isolation)."""
    if os.geteuid() != 0:
        return "the agent does not run as root"
    return "--no-isolation: the agent's own user runs every job"


def unavailable() -> str:
    """Why this machine cannot sandbox commands ("" when it can): the agent must be root, and the
    kernel must let it make mount and PID namespaces (a container without CAP_SYS_ADMIN cannot)."""
    if os.geteuid() != 0:
        return "the agent does not run as root"
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    child = os.fork()
    if child == 0:  # try in a child: unshare would change this process for good
        os._exit(0 if libc.unshare(0x00020000 | 0x20000000) == 0 else 1)
    _, status = os.waitpid(child, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return "the kernel refuses the agent new mount and PID namespaces (run it as root on the node, not in a container)"
    return ""


def probe_project_view(base: Path) -> bool:
    """Whether the launcher can lay a project here (a process of the launcher's kind, as root)."""
    shutil.rmtree(base, ignore_errors=True)
    try:
        base.mkdir(mode=0o700, parents=True)
        done = subprocess.run([sys.executable, "-I", "-S", str(PROJECT_VIEW), "--probe", str(base)], env={}, cwd="/",
                              capture_output=True, text=True, timeout=30, check=False)
        answer = (done.stdout.strip() or done.stderr.strip()).splitlines()[-1:] or ["no answer"]
    except (OSError, subprocess.SubprocessError) as exc:
        answer = [str(exc)]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if answer != ["ok"]:
        log.warning("projects are copied into each job's directory: this node cannot lay them copy-on-write (%s)", answer[0])
    return answer == ["ok"]


__all__ = ["LAUNCHER", "probe_project_view", "CgroupSupport", "SandboxSettings", "unavailable", "why_unconfined"]
