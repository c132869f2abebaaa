"""The node's cache directory as environments and requirements overlays share it: the lock that
lets one job at a time build an entry, the permissions that make a complete entry safe to share
with jobs (the agent's user's, read-only to others), and the virtual-environment plumbing both
builders use (site-packages, a layer's console scripts). Plain files only: nothing here builds.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import stat
import sysconfig
from collections.abc import AsyncIterator
from configparser import ConfigParser
from pathlib import Path
from typing import Protocol

SECURED = "simpleai-permissions"  # written once every file of the entry is the agent's and read-only to others
LOCK_POLL = 0.5  # seconds between tries of a busy lock (polled: a stopped job stops waiting)


class JobLog(Protocol):
    def info(self, text: str) -> None: ...

    def warning(self, text: str) -> None: ...


@contextlib.asynccontextmanager
async def node_lock(path: Path, log: JobLog, waiting: str) -> AsyncIterator[None]:
    """An exclusive lock of the node's cache (flock on `path`), polled so that a stopped job stops
    waiting; the job's log says `waiting` once while another job holds it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(path, "w") as handle:
        said = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not said:
                    log.info(waiting)
                    said = True
                await asyncio.sleep(LOCK_POLL)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def secure_tree(root: Path) -> None:
    """Everything under `root` becomes the agent's user's, readable by all and writable by the
    agent alone (no set-uid bits); then `root` says so (SECURED). Links are not followed."""
    uid, gid = os.geteuid(), os.getegid()
    for directory, dirs, files in os.walk(root):
        secure_path(directory, uid, gid)
        for name in [*dirs, *files]:
            secure_path(os.path.join(directory, name), uid, gid)
    (root / SECURED).write_text("every file is the agent's and read-only to jobs\n")
    os.chmod(root / SECURED, 0o644)


def secure_once(root: Path) -> None:
    if not (root / SECURED).is_file():
        secure_tree(root)


def secure_path(path: str, uid: int, gid: int, directory_mode: int | None = None) -> None:
    found = os.lstat(path)
    if (found.st_uid, found.st_gid) != (uid, gid):
        with contextlib.suppress(PermissionError):  # an agent that is not root keeps what it cannot change
            os.lchown(path, uid, gid)
    if stat.S_ISLNK(found.st_mode):
        return
    mode = stat.S_IMODE(found.st_mode)
    if stat.S_ISDIR(found.st_mode):
        wanted = directory_mode if directory_mode is not None else (mode | 0o555) & ~0o7022
    else:
        executable = 0o111 if mode & 0o100 else 0
        wanted = (mode | 0o444 | executable) & ~0o7022
    if wanted != mode:
        with contextlib.suppress(PermissionError):
            os.chmod(path, wanted)


def site_packages(venv: Path) -> Path:
    purelib = sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})
    return Path(purelib)


def link_console_scripts(layer: Path, bin_dir: Path) -> None:
    """The layer's programs (torchrun, …) as scripts of the environment's own Python."""
    python = bin_dir / "python"
    for entry_points in layer.glob("*.dist-info/entry_points.txt"):
        cfg = ConfigParser(interpolation=None)
        cfg.optionxform = str  # type: ignore[assignment,method-assign]  # script names are case-sensitive
        cfg.read_string(entry_points.read_text())
        if not cfg.has_section("console_scripts"):
            continue
        for name, target in cfg.items("console_scripts"):
            module, _, attr = target.strip().partition(":")
            script = bin_dir / name
            script.write_text(
                f"#!{python}\nimport sys\nfrom {module} import {attr.split('.')[0]}\n"
                f"sys.exit({attr}())\n"
            )
            script.chmod(0o755)
