"""Finishing checkpoints in the background: footer, fsync, manifests, the commit, retention, mirror.

One committer thread per engine handles checkpoints in the order they were saved:
  every rank   finishes its shard file, writes its extra files and its `rank-R.json`;
  rank 0       waits until every rank's `rank-R.json` is there, writes MANIFEST.json (the commit
               marker, holding every file's SHA-256 and, with the job's key, signed), renames
               `.staging/step-N` to `step-N`, applies retention (to trusted steps only), and
               hands the checkpoint to the mirror thread for upload.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import CheckpointConfig
from .copier import CopyBatch
from .errors import CheckpointCorrupted
from .layout import MANIFEST, REMOTE, rank_manifest_name, shard_name, step_name
from .manifest import FileEntry, Manifest, RankManifest, now_iso
from .safe_pickle import forbidden_global
from .storage.local import WriteLock, discard, fsync_dir, promote, write_atomic
from .storage.s3 import S3Mirror
from .trust import Trust
from .writer import ShardJob, lower_priority

log = logging.getLogger("concurrent_checkpoint")


class CheckpointError(RuntimeError):
    """A checkpoint could not be made durable (its step and cause are in the message)."""


class TornSnapshot(CheckpointError):
    """A tensor changed while it was being copied lazily; the checkpoint was not committed."""


@dataclass(eq=False)
class PendingCheckpoint:
    """A `save()` whose files are still being written. `wait()` returns when it is durable."""

    step: int
    job: ShardJob
    staging: Path
    files: dict[str, bytes]
    metadata: dict[str, Any]
    lock: WriteLock | None = None
    batch: CopyBatch | None = None
    stall_seconds: float = 0.0
    backpressure_seconds: float = 0.0
    error: BaseException | None = None
    path: Path | None = None  # the committed directory (rank 0)
    _verdict: threading.Event = field(default_factory=threading.Event)
    _torn: int = 0
    _durable: threading.Event = field(default_factory=threading.Event)

    def set_verdict(self, changed_tensors: int = 0) -> None:
        self._torn = changed_tensors
        self._verdict.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._durable.wait(timeout)

    @property
    def done(self) -> bool:
        return self._durable.is_set()


class Committer:
    def __init__(self, root: Path, rank: int, world_size: int, config: CheckpointConfig,
                 started: float, protected: Callable[[], set[int]],
                 mirror: S3Mirror | None, trust: Trust) -> None:
        self.root, self.rank, self.world_size, self.config = root, rank, world_size, config
        self.trust = trust
        self._refused_globals: set[str] = set()
        self.started = started
        self.protected = protected
        self.mirror = mirror
        self.errors: list[BaseException] = []
        self.on_commit: list[Callable[[PendingCheckpoint], None]] = []
        self._mirror_pending: set[int] = set()
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._mirror_queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="ckpt-commit", daemon=True)
        self._thread.start()
        self._mirror_thread: threading.Thread | None = None
        if mirror is not None:
            self._mirror_thread = threading.Thread(target=self._mirror_loop, name="ckpt-mirror",
                                                   daemon=True)
            self._mirror_thread.start()

    def submit(self, pending: PendingCheckpoint) -> None:
        self._queue.put(pending)

    def join(self) -> None:
        self._queue.join()
        self._mirror_queue.join()

    def take_errors(self) -> list[BaseException]:
        with self._lock:
            errors, self.errors = self.errors, []
        return errors

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=120)
        if self._mirror_thread is not None:
            self._mirror_queue.put(None)
            self._mirror_thread.join(timeout=600)

    # --- commit thread -------------------------------------------------------------------------

    def _loop(self) -> None:
        lower_priority(self.config.background_nice)
        while (pending := self._queue.get()) is not None:
            try:
                self._commit(pending)
            except BaseException as exc:  # recorded for wait(); training goes on
                pending.error = exc
                pending.job.abandon()
                if self.rank == 0:
                    discard(pending.staging, self.root)
                with self._lock:
                    self.errors.append(exc)
                log.error("[Concurrent Checkpoint] checkpoint step %d failed: %s", pending.step, exc)
            finally:
                if pending.lock is not None:
                    pending.lock.release(pending.staging, self.root / step_name(pending.step))
                pending._durable.set()
                self._queue.task_done()
        self._queue.task_done()

    def _commit(self, pending: PendingCheckpoint) -> None:
        job = pending.job
        job.wait_pieces()
        pending._verdict.wait()
        if job.error is not None:
            raise CheckpointError(f"step {pending.step}: writing the shard failed: {job.error}") \
                from job.error
        if pending._torn:
            raise TornSnapshot(
                f"step {pending.step}: {pending._torn} tensor(s) were modified in place before their "
                "lazy copy finished (e.g. BatchNorm statistics in the forward pass); this checkpoint "
                "was discarded. Save with lazy=False for such models.")
        self._write_rank_files(pending)
        if self.rank != 0:
            return
        manifests = self._gather(pending.staging, pending.step)
        manifest = Manifest(step=pending.step, world_size=self.world_size, time=now_iso(),
                            created=time.time(), metadata=pending.metadata,
                            files=[e for m in manifests for e in m.files])
        manifest.stored = manifest.to_json(self.trust.key)
        write_atomic(pending.staging / MANIFEST, manifest.stored, self.config.fsync)
        if self.config.fsync:
            fsync_dir(pending.staging)
        pending.path = promote(pending.staging, self.root, pending.step, self.config.fsync)
        log.info("[Concurrent Checkpoint] step %d committed (%d bytes) at %s",
                 pending.step, manifest.total_bytes, pending.path)
        for callback in self.on_commit:
            callback(pending)
        self._retain(pending.step)
        if self.mirror is not None:
            with self._lock:
                self._mirror_pending.add(pending.step)
            self._mirror_queue.put((pending.path, manifest))  # manifest.stored: the signed bytes

    def _write_rank_files(self, pending: PendingCheckpoint) -> list[FileEntry]:
        fsync = self.config.fsync
        size, crc, hashes = pending.job.finish(fsync)
        self._warn_unloadable(pending)
        entries = [FileEntry(name=shard_name(self.rank, self.world_size), rank=self.rank, bytes=size,
                             crc32=crc, raw_bytes=pending.job.snapshot.raw_bytes, kind="shard",
                             sha256=hashes)]
        for name, data in pending.files.items():
            write_atomic(pending.staging / name, data, fsync)
            entries.append(FileEntry.of_bytes(name, self.rank, data))
        record = RankManifest(step=pending.step, rank=self.rank, world_size=self.world_size,
                              time=now_iso(), files=entries)
        write_atomic(pending.staging / rank_manifest_name(self.rank), record.to_json(), fsync)
        if fsync:
            fsync_dir(pending.staging)
        return entries

    def _warn_unloadable(self, pending: PendingCheckpoint) -> None:
        """Loading refuses globals that are not allowed; say so now, once, not at the resume."""
        name = forbidden_global(pending.job.snapshot.skeleton)
        if name is None or name in self._refused_globals:
            return
        self._refused_globals.add(name)
        log.warning("[Concurrent Checkpoint] step %d holds %s, which loading refuses unless the job "
                    "calls concurrent_checkpoint.allow_globals(...) with it before it resumes",
                    pending.step, name)

    def _gather(self, staging: Path, step: int) -> list[RankManifest]:
        """Every rank's manifest for this step; polls the (shared) directory until all are there."""
        deadline = time.monotonic() + self.config.commit_timeout
        delay = 0.02
        while True:
            found = []
            for rank in range(self.world_size):
                path = staging / rank_manifest_name(rank)
                if path.is_file():
                    record = RankManifest.from_json(path.read_bytes())
                    if record.step == step and record.world_size == self.world_size:
                        found.append(record)
            if len(found) == self.world_size:
                return found
            if time.monotonic() > deadline:
                raise CheckpointError(
                    f"step {step}: only {len(found)} of {self.world_size} ranks wrote their shard within "
                    f"{self.config.commit_timeout:.0f} s (is the output directory shared by all ranks?)")
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _retain(self, step: int) -> None:
        # Only trusted steps count: a step planted by someone else must neither push this job's
        # own checkpoints out of `keep_last` nor be deleted here (it stays, ignored and warned of).
        keep = set(self.protected())
        steps = self.trust.local_steps(self.root)
        for other in [s for s in steps if s > step]:
            # newer than what this run just saved yet older than this run: an abandoned timeline
            try:
                created = self.trust.read(self.root / step_name(other) / MANIFEST, other).created
            except (OSError, CheckpointCorrupted):
                created = 0.0
            if created < self.started:
                log.warning("[Concurrent Checkpoint] removing step %d from an earlier run: this run "
                            "resumed before it and has now saved step %d", other, step)
                discard(self.root / step_name(other), self.root)
        steps = self.trust.local_steps(self.root)
        keep |= set(steps[-self.config.keep_last:])
        with self._lock:
            keep |= self._mirror_pending  # the uploader still reads these
        for old in steps:
            if old not in keep:
                discard(self.root / step_name(old), self.root)
        if (self.root / REMOTE).exists():
            discard(self.root / REMOTE, self.root)  # fetched for a resume; superseded now

    # --- mirror thread -------------------------------------------------------------------------

    def _mirror_loop(self) -> None:
        assert self.mirror is not None
        lower_priority(self.config.background_nice)
        while (item := self._mirror_queue.get()) is not None:
            path, manifest = item
            try:
                began = time.perf_counter()
                self.mirror.upload(path, manifest)
                log.info("[Concurrent Checkpoint] step %d mirrored to %s in %.1f s",
                         manifest.step, self.mirror.config.url, time.perf_counter() - began)
                self._retain_remote(manifest.step)
            except BaseException as exc:
                with self._lock:
                    self.errors.append(exc)
                log.error("[Concurrent Checkpoint] mirroring step %d to %s failed: %s",
                          manifest.step, self.mirror.config.url, exc)
            finally:
                with self._lock:
                    self._mirror_pending.discard(manifest.step)
                self._mirror_queue.task_done()
        self._mirror_queue.task_done()

    def _retain_remote(self, step: int) -> None:
        assert self.mirror is not None
        steps = self.mirror.complete_steps()
        for other in [s for s in steps if s > step]:
            if self.mirror.manifest(other).created < self.started:
                self.mirror.delete(other)
        steps = [s for s in steps if s <= step]
        keep = set(steps[-self.config.keep_last:]) | set(self.protected())
        for old in steps:
            if old not in keep:
                self.mirror.delete(old)

