"""Local-disk operations that make a checkpoint appear atomically and disappear cleanly.

A checkpoint is written inside `.staging/step-N/`, every file flushed with fsync, MANIFEST.json
written last, and the directory renamed to `step-N/` in one step. A process killed at any moment
leaves either the old set of complete checkpoints or the new one, never a half-written one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from pathlib import Path

from ..layout import MANIFEST, STAGING, TRASH, parse_step, step_name

LOCK_PREFIX = ".lock-rank-"


class WriteLock:
    """Held by a rank while it writes into a staging directory; released by the kernel if the
    process dies, so `recover` (in this or any other process) never removes live work."""

    def __init__(self, directory: Path, rank: int) -> None:
        self.name = f"{LOCK_PREFIX}{rank:05d}"
        self.fd = os.open(directory / self.name, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def release(self, *directories: Path) -> None:
        """Unlock; remove the lock file from whichever directory it ended up in."""
        if self.fd < 0:
            return
        for directory in directories:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / self.name)
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = -1


def in_use(directory: Path) -> bool:
    """Whether some live process holds a write lock in `directory`."""
    for lock in directory.glob(LOCK_PREFIX + "*"):
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # also drops the lock we may just have taken
    return False


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, fsync: bool = True) -> None:
    """Write to a temporary name, flush to disk, then rename over `path`."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        if fsync:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)


def discard(path: Path, root: Path) -> None:
    """Remove a directory so that no half-deleted checkpoint is ever visible: rename, then delete."""
    if not path.exists():
        return
    trash = root / TRASH
    trash.mkdir(parents=True, exist_ok=True)
    target = trash / f"{path.name}-{time.time_ns()}"
    os.replace(path, target)
    shutil.rmtree(target, ignore_errors=True)


def promote(staged: Path, root: Path, step: int, fsync: bool = True) -> Path:
    """Move a fully written staging directory to `step-N` (replacing an older one of that step)."""
    final = root / step_name(step)
    if final.exists():
        # the old copy goes first; if we die before the next rename, recover() finishes the job
        trash = root / TRASH
        trash.mkdir(parents=True, exist_ok=True)
        os.replace(final, trash / f"{final.name}-{time.time_ns()}")
    os.replace(staged, final)
    if fsync:
        fsync_dir(root)
    return final


def recover(root: Path, fsync: bool = True) -> list[int]:
    """After a crash: finish promotions whose MANIFEST was written, drop partial work.

    Rank 0 calls this at start-up. Staging directories some live process is writing (locked)
    are left alone. Returns the steps that were promoted.
    """
    promoted = []
    staging = root / STAGING
    if staging.is_dir():
        for entry in list(os.scandir(staging)):
            step = parse_step(entry.name)
            path = Path(entry.path)
            if in_use(path):
                continue
            if step is not None and (path / MANIFEST).is_file():  # complete: newer than step-N
                promote(path, root, step, fsync)
                promoted.append(step)
            else:
                shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(root / TRASH, ignore_errors=True)
    return promoted
