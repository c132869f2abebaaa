"""The node's content-addressed caches, kept under a size cap: least recently used first, never
what a job uses.

What is counted and evicted, one entry each:

    <work-dir>/projects/<tenant>/<sha256>/          a project (nodeagent.projects)
    <work-dir>/inputs/<tenant>/trees/<key>/         an input's tree (nodeagent.inputs); its blobs
                                                    go once no tree links them any more
    <env-cache>/overlays/<key>/                     a requirements overlay (nodeagent.requirements)

Beside each entry, `<entry>.use`: a placement holds a shared lock on it from before it looks
the entry up until it has ended (`Uses`), and its modification time is the entry's last use.
Eviction takes the lock exclusively without waiting (an entry in use is skipped), then removes
the entry and the lock file; a holder checks after locking that its lock file is still the one
at that path, so it never holds a lock on a removed file. The locks are flock(2)s: they hold
across the agents of a machine that share an environment cache, and vanish with a dead agent.

The training environments themselves and the torch layers are not evicted here (every job of a
framework needs them; nodeagent.envcache). The cap is the agent's --cache-max-gb (none: unbounded).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)
USE = ".use"


def use_file(entry: Path) -> Path:
    return entry.with_name(entry.name + USE)


class Uses:
    """The cache entries one placement uses, each under a shared lock until `release`."""

    def __init__(self) -> None:
        self.held: dict[Path, int] = {}
        self.grew = False  # the placement added to a cache (the cap is checked only then)

    def hold(self, entry: Path) -> None:
        """Lock `entry` shared (blocking: call it in a thread) and mark it used now; before the
        entry is looked up, so that it cannot go between the look and the lock."""
        if entry in self.held:
            return
        path = use_file(entry)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        while True:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(descriptor, fcntl.LOCK_SH)
            try:
                same = os.stat(path).st_ino == os.fstat(descriptor).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(descriptor)  # evicted while this waited: lock the new file
        os.utime(descriptor)
        self.held[entry] = descriptor

    def release(self) -> None:
        for descriptor in self.held.values():
            os.close(descriptor)
        self.held.clear()


@dataclass(frozen=True)
class Entry:
    path: Path
    kind: str  # "project", "input" or "overlay"
    last_use: float
    size: int  # the bytes its eviction frees


def entries(work_dir: Path, env_cache: Path | None) -> list[Entry]:
    found: list[Entry] = []
    for tenant in _dirs(work_dir / "projects"):
        found += [_entry(path, "project") for path in _dirs(tenant) if len(path.name) == 64]
    for tenant in _dirs(work_dir / "inputs"):
        found += [_entry(path, "input") for path in _dirs(tenant / "trees") if "." not in path.name]
    if env_cache is not None:
        found += [_entry(path, "overlay") for path in _dirs(env_cache / "overlays") if "." not in path.name]
    return found


def _dirs(folder: Path) -> list[Path]:
    try:
        return [Path(item.path) for item in os.scandir(folder) if item.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _entry(path: Path, kind: str) -> Entry:
    try:
        last_use = os.stat(use_file(path)).st_mtime
    except OSError:
        last_use = os.stat(path).st_mtime
    # an input's files are links to its tenant's blobs: only those no other tree links are freed with it
    return Entry(path, kind, last_use, disk_usage(path, only_linked_twice=kind == "input"))


def disk_usage(path: Path, only_linked_twice: bool = False) -> int:
    total, seen = 0, set[tuple[int, int]]()
    for directory, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            with contextlib.suppress(OSError):
                info = os.lstat(os.path.join(directory, name))
                if (info.st_dev, info.st_ino) in seen:
                    continue
                seen.add((info.st_dev, info.st_ino))
                if only_linked_twice and stat.S_ISREG(info.st_mode) and info.st_nlink != 2:
                    continue
                total += info.st_blocks * 512
    return total


def trim(work_dir: Path, env_cache: Path | None, cap: int) -> list[Entry]:
    """Evict least recently used entries until the caches hold at most `cap` bytes (blocking).
    Returns what was evicted; an entry in use stays, even over the cap."""
    found = entries(work_dir, env_cache)
    total = sum(disk_usage(path) for path in _roots(work_dir, env_cache))
    evicted: list[Entry] = []
    for entry in sorted(found, key=lambda item: item.last_use):
        if total <= cap:
            break
        if _evict(entry):
            evicted.append(entry)
            total -= entry.size
            if entry.kind == "input":
                _collect_blobs(entry.path.parent.parent)
            log.info("cache: evicted the %s %s (%d bytes; last used %s)", entry.kind, entry.path, entry.size, entry.last_use)
    return evicted


def _roots(work_dir: Path, env_cache: Path | None) -> list[Path]:
    return [work_dir / "projects", work_dir / "inputs", *([env_cache / "overlays"] if env_cache is not None else [])]


def _evict(entry: Entry) -> bool:
    path = use_file(entry.path)
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a placement uses it
        # out of sight at once (a lookup then finds nothing and downloads it again), then removed
        gone = entry.path.with_name(f"{entry.path.name}.evicted")
        shutil.rmtree(gone, ignore_errors=True)
        try:
            os.rename(entry.path, gone)
        except OSError:
            return False
        shutil.rmtree(gone, ignore_errors=True)
        path.unlink(missing_ok=True)  # while locked: a waiting holder sees it gone and locks a new one
        return True
    finally:
        os.close(descriptor)


def _collect_blobs(tenant: Path) -> None:
    """Remove the tenant's blobs that no tree links, unless a sync of the tenant runs (it links
    blobs it has just downloaded: nodeagent.inputs holds this lock shared meanwhile)."""
    (tenant / "locks").mkdir(mode=0o700, exist_ok=True)
    with open(tenant / "locks" / "blobs.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        for blob in os.scandir(tenant / "blobs"):
            with contextlib.suppress(OSError):
                if blob.is_file(follow_symlinks=False) and blob.stat(follow_symlinks=False).st_nlink == 1:
                    os.unlink(blob.path)


@contextlib.contextmanager
def syncing_blobs(tenant: Path) -> Iterator[None]:
    """While an input of `tenant` syncs: its blobs are not collected."""
    (tenant / "locks").mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(tenant / "locks" / "blobs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        yield
