"""The checkpoint engine: `save()` snapshots and returns; threads write; `load_latest()` resumes
(loading.py holds the reading half).

    engine = CheckpointEngine("out", host_cache_size=4, parser_threads=2)
    ckpt = engine.load_latest()                  # newest complete checkpoint, or None
    ...
    engine.save(step, {"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    ...
    engine.wait()                                # everything durable (and mirrored)
"""

from __future__ import annotations

import atexit
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from .committer import CheckpointError, Committer, PendingCheckpoint
from .config import CheckpointConfig
from .copier import Copier
from .distributed import resolve_rank
from .host_cache import HostCache
from .layout import MANIFEST, ROOT_NAME, STAGING, shard_name, step_name
from .loading import CheckpointLoading
from .snapshot import Snapshot, capture, estimate_bytes, plan_pieces
from .storage.local import WriteLock, recover
from .storage.s3 import S3Mirror
from .trust import Trust
from .writer import ShardJob, WriterPool

log = logging.getLogger("concurrent_checkpoint")
_MiB = 1 << 20


@dataclass
class EngineStats:
    saves: int = 0
    committed: int = 0
    backpressure_waits: int = 0
    backpressure_seconds: float = 0.0
    stall_seconds: list[float] = field(default_factory=list)  # time each save() blocked
    lazy_wait_seconds: float = 0.0  # time the optimizer step waited for lazy copies
    raw_bytes: int = 0


class CheckpointEngine(CheckpointLoading):
    def __init__(self, output_dir: str | Path, *, config: CheckpointConfig | None = None,
                 **settings: Any) -> None:
        """`output_dir`: checkpoints go to `<output_dir>/concurrent_checkpoint/`.

        Settings (see `CheckpointConfig`) come as keyword arguments or a ready `config`.
        """
        if config is None:
            config = CheckpointConfig.resolve(**settings)
        elif settings:
            config = config.with_overrides(**settings)
        self.config = config
        self.root = Path(output_dir) / ROOT_NAME
        self.rank, self.world_size = resolve_rank(config.rank, config.world_size)
        self.lazy = torch.cuda.is_available() if config.lazy is None else config.lazy
        self.stats = EngineStats()
        self.protected_steps: set[int] = set()  # never removed by retention (e.g. the best model)
        self.started = time.time()
        self.root.mkdir(parents=True, exist_ok=True)
        if self.rank == 0:
            for step in recover(self.root, config.fsync):
                log.warning("[Concurrent Checkpoint] finished committing step %d after a crash", step)
        self._trust = Trust(config.signing_key)
        self._mirror = S3Mirror(config.s3, self._trust) if config.s3 is not None else None
        if self._mirror is not None:
            self._mirror.check()
        self._cache: HostCache | None = None
        self._copier: Copier | None = None
        self._writers: WriterPool | None = None
        self._piece_max = config.piece_mb * _MiB
        self._in_flight: list[PendingCheckpoint] = []
        self._lazy_pending: PendingCheckpoint | None = None
        self._hook: Any = None
        self._closed = False
        self._committer = Committer(self.root, self.rank, self.world_size, config, self.started,
                                    lambda: set(self.protected_steps), self._mirror, self._trust)
        self._committer.on_commit.append(self._count_commit)
        atexit.register(self._at_exit)

    # --- saving --------------------------------------------------------------------------------

    def save(self, step: int, state: Any, *, files: dict[str, bytes] | None = None,
             metadata: dict[str, Any] | None = None) -> PendingCheckpoint:
        """Snapshot `state` into the host cache and return; the files are written in the background.

        `files`: small extra files stored beside the shard (e.g. a JSON trainer state).
        Blocks only for the copy into the host cache, and while the cache is full (back-pressure).
        """
        began = time.perf_counter()
        if self._closed:
            raise CheckpointError("the checkpoint engine is closed")
        self.wait_for_snapshot()
        self._wait_same_step(step)
        snapshot = capture(state)
        self._ensure_cache(snapshot)
        plan_pieces(snapshot, self._piece_max)
        staging = self.root / STAGING / step_name(step)
        staging.mkdir(parents=True, exist_ok=True)
        lock = WriteLock(staging, self.rank)  # first, so that no recover() removes this directory
        try:
            job = ShardJob(staging / shard_name(self.rank, self.world_size), snapshot, self.config.direct_io)
        except BaseException:
            lock.release(staging)
            raise
        pending = PendingCheckpoint(step=step, staging=staging, files=dict(files or {}),
                                    metadata=dict(metadata or {}), lock=lock, job=job)
        self._in_flight.append(pending)
        try:
            self._copy_and_submit(pending, snapshot)
        finally:
            self._committer.submit(pending)  # also a failed save: its files get cleaned up
        pending.stall_seconds = time.perf_counter() - began
        self._account(pending, snapshot)
        return pending

    def wait_for_snapshot(self) -> None:
        """Lazy mode: block until the last snapshot's copies are done (called before optimizer steps)."""
        pending, self._lazy_pending = self._lazy_pending, None
        if pending is None or pending.batch is None:
            return
        began = time.perf_counter()
        try:
            pending.batch.wait()
        except BaseException as exc:  # the writer reports it; the verdict must still be given
            log.error("[Concurrent Checkpoint] lazy copy for step %d failed: %s", pending.step, exc)
        pending.set_verdict(pending.batch.changed_tensors())
        pending.job.snapshot.release_sources()
        self.stats.lazy_wait_seconds += time.perf_counter() - began

    def wait(self) -> None:
        """Block until every saved checkpoint is durable (and mirrored); raise if any failed."""
        self.wait_for_snapshot()
        for pending in list(self._in_flight):
            pending.wait()
        self._committer.join()
        self._in_flight = [p for p in self._in_flight if not p.done]
        errors = self._committer.take_errors()
        if errors:
            raise CheckpointError(f"{len(errors)} checkpoint(s) failed; first: {errors[0]}") from errors[0]

    def close(self) -> None:
        """Wait for pending checkpoints, then stop the threads and free the host cache."""
        if self._closed:
            return
        try:
            self.wait()
        finally:
            self._closed = True
            if self._hook is not None:
                self._hook.remove()
                self._hook = None
            self._committer.close()
            if self._writers is not None:
                self._writers.close()
            if self._copier is not None:
                self._copier.close()
            if self._cache is not None:
                self._cache.close()
            self._cache = None
            atexit.unregister(self._at_exit)

    def __enter__(self) -> CheckpointEngine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- loading: the rest is CheckpointLoading's (loading.py) ----------------------------------

    def has_step(self, step: int) -> bool:
        """Whether `step` is complete on local disk or still being written by this engine."""
        return any(p.step == step and p.error is None for p in self._in_flight) or \
            (self.root / step_name(step) / MANIFEST).is_file()

    # --- internals -----------------------------------------------------------------------------

    def _ensure_cache(self, snapshot: Snapshot) -> None:
        """Allocate the host cache once, at the first save, when the checkpoint size is known."""
        if self._cache is not None:
            return
        need = estimate_bytes(snapshot.specs, self._piece_max)
        requested = self.config.host_cache_bytes
        capacity = min(requested, max(2 * need, 4 * _MiB))  # room for two checkpoints in flight
        available = _available_memory()
        if available is not None and capacity > available // 2:
            log.warning("[Concurrent Checkpoint] host cache limited to %.2f GB (half the available "
                        "memory) instead of %.2f GB", available / 2**31, capacity / 2**30)
            capacity = available // 2
        self._cache = HostCache(capacity, pin=self.config.pin_host_cache)
        # several pieces in flight at once, so copying and writing overlap
        self._piece_max = max(64, min(self._piece_max, self._cache.capacity // 4))
        self._copier = Copier(self._cache, self.lazy)
        self._writers = WriterPool(self._cache, self.config.parser_threads, self.config.background_nice)
        if capacity < need:
            log.warning("[Concurrent Checkpoint] host cache (%.1f MB) is smaller than one checkpoint "
                        "(%.1f MB): every save will wait for its own writes", capacity / _MiB, need / _MiB)

    def _copy_and_submit(self, pending: PendingCheckpoint, snapshot: Snapshot) -> None:
        submitted = 0
        try:
            assert self._cache is not None and self._copier is not None and self._writers is not None
            if self.lazy:
                self._install_step_hook()
            batch = pending.batch = self._copier.begin(snapshot, snapshot.originals)
            for piece in snapshot.pieces:
                region, waited = self._cache.allocate(piece.length, abort=self._abort_reason)
                pending.backpressure_seconds += waited
                ready = self._copier.copy(batch, piece, region)
                self._writers.submit(pending.job, piece, region, ready)
                submitted += 1
            self._copier.finish(batch)
        except BaseException as exc:
            for _ in snapshot.pieces[submitted:]:  # never written: the job must still finish
                pending.job.fail(exc)
            pending.set_verdict()
            raise
        if self.lazy and batch.readies:
            self._lazy_pending = pending  # judged by wait_for_snapshot() before the next step
        else:
            snapshot.release_sources()
            pending.set_verdict()

    def _account(self, pending: PendingCheckpoint, snapshot: Snapshot) -> None:
        stats = self.stats
        stats.saves += 1
        stats.raw_bytes += snapshot.raw_bytes
        stats.stall_seconds.append(pending.stall_seconds)
        if pending.backpressure_seconds > 0.001:
            stats.backpressure_waits += 1
            stats.backpressure_seconds += pending.backpressure_seconds
            assert self._cache is not None
            log.warning(
                "[Concurrent Checkpoint] host cache full (%.1f MB): save of step %d waited %.2f s for "
                "earlier checkpoint data to be written; storage is slower than the checkpoint rate or "
                "host_cache_size is too small", self._cache.capacity / _MiB, pending.step,
                pending.backpressure_seconds)

    def _install_step_hook(self) -> None:
        if self._hook is None:
            self._hook = register_optimizer_step_pre_hook(
                lambda optimizer, args, kwargs: self.wait_for_snapshot())

    def _wait_same_step(self, step: int) -> None:
        for pending in self._in_flight:
            if pending.step == step and not pending.done:
                pending.wait()
        self._in_flight = [p for p in self._in_flight if not p.done]

    def _drain(self) -> None:
        if self._in_flight:
            self.wait()

    def _abort_reason(self) -> BaseException | None:
        return CheckpointError("the checkpoint engine is closed") if self._closed else None

    def _count_commit(self, pending: PendingCheckpoint) -> None:
        self.stats.committed += 1

    def _at_exit(self) -> None:
        try:
            self.close()
        except Exception as exc:  # nothing left to raise to at interpreter exit
            log.error("[Concurrent Checkpoint] at exit: %s", exc)


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
