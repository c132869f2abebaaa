"""Background writers (`parser_threads` of them): host-cache pieces to their offsets in the shard.

Each piece is written with `pwrite` straight from the host cache (no further copy), its SHA-256
computed there while its bytes are still in the cache (in parallel: hashlib releases the GIL),
and its cache region released, which is what lets a waiting `save()` go on.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import queue
import threading
import zlib
from pathlib import Path
from typing import Any

from .copier import Ready
from .host_cache import HostCache, Region
from .shardfile import encode_footer, pwrite_all
from .snapshot import Piece, Snapshot


class ShardJob:
    """One rank's shard file of one checkpoint, while its pieces are being written."""

    def __init__(self, path: Path, snapshot: Snapshot, direct_io: bool = True) -> None:
        self.path = path
        self.tmp_path = path.with_name(path.name + ".partial")
        self.snapshot = snapshot
        self.fd = os.open(self.tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        # Pieces go through O_DIRECT: the device reads them from the host cache, no page-cache copy
        # (on a 2-core machine buffered writes of 400 MB cost ~1 s of CPU taken from training).
        self.direct_fd = -1
        if direct_io and hasattr(os, "O_DIRECT"):
            with contextlib.suppress(OSError):  # not every filesystem has it (tmpfs, some FUSE)
                self.direct_fd = os.open(self.tmp_path, os.O_WRONLY | os.O_DIRECT)
        self.error: BaseException | None = None
        self._remaining = len(snapshot.pieces)
        self._hashes: list[tuple[int, int, str]] = []  # (offset, length, sha256 hex) per written piece
        self._lock = threading.Lock()
        self._done = threading.Event()
        if self._remaining == 0:
            self._done.set()

    def piece_done(self, digest: tuple[int, int, str] | None) -> None:
        with self._lock:
            if digest is not None:
                self._hashes.append(digest)
            self._remaining -= 1
            if self._remaining == 0:
                self._done.set()

    def write_piece(self, data: memoryview, offset: int) -> None:
        fd = self.direct_fd
        if fd >= 0:
            try:
                pwrite_all(fd, data, offset)
                return
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self.direct_fd = -1  # the filesystem refuses O_DIRECT writes: buffered from now on
        pwrite_all(self.fd, data, offset)

    def fail(self, error: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = error
        self.piece_done(None)

    def wait_pieces(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def finish(self, fsync: bool) -> tuple[int, int, list[list[Any]]]:
        """Append structure and footer, flush, and rename into place.

        Returns (size, footer CRC, [[length, sha256 hex], ...] covering the whole file in order)."""
        snapshot = self.snapshot
        pieces = self._piece_hashes(snapshot.data_end)
        skeleton_offset = snapshot.data_end
        footer = encode_footer(snapshot.specs, skeleton_offset, snapshot.skeleton, pieces)
        pwrite_all(self.fd, snapshot.skeleton, skeleton_offset)
        pwrite_all(self.fd, footer, skeleton_offset + len(snapshot.skeleton))
        size = skeleton_offset + len(snapshot.skeleton) + len(footer)
        if fsync:
            os.fsync(self.fd)
        self._close()
        os.replace(self.tmp_path, self.path)
        tail = hashlib.sha256(snapshot.skeleton)
        tail.update(footer)
        return size, zlib.crc32(footer), [*pieces, [len(snapshot.skeleton) + len(footer), tail.hexdigest()]]

    def _piece_hashes(self, data_end: int) -> list[list[Any]]:
        """The pieces' hashes in file order; a stretch no piece covered (none today: plan_pieces
        lays pieces end to end) reads as zeros and is hashed as such."""
        ranges: list[list[Any]] = []
        position = 0
        for offset, length, digest in sorted(self._hashes):
            if offset > position:
                ranges.append([offset - position, hashlib.sha256(bytes(offset - position)).hexdigest()])
            elif offset < position:
                raise RuntimeError(f"{self.path}: pieces overlap at {offset}")
            ranges.append([length, digest])
            position = offset + length
        if position < data_end:
            ranges.append([data_end - position, hashlib.sha256(bytes(data_end - position)).hexdigest()])
        return ranges

    def abandon(self) -> None:
        self._close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp_path)

    def _close(self) -> None:
        for name in ("fd", "direct_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)


class WriterPool:
    def __init__(self, cache: HostCache, threads: int, nice: int = 0) -> None:
        self.cache = cache
        self.nice = nice
        self._queue: queue.Queue = queue.Queue()
        self._threads = [threading.Thread(target=self._run, name=f"ckpt-writer-{i}", daemon=True)
                         for i in range(threads)]
        for thread in self._threads:
            thread.start()

    def submit(self, job: ShardJob, piece: Piece, region: Region, ready: Ready) -> None:
        self._queue.put((job, piece, region, ready))

    def close(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout=60)

    def _run(self) -> None:
        lower_priority(self.nice)
        while (task := self._queue.get()) is not None:
            job, piece, region, ready = task
            try:
                ready.wait()  # lazy copies: the bytes must be in the cache first
                if job.error is None:
                    job.piece_done(self._write(job, piece, region))
                else:
                    job.piece_done(None)
            except BaseException as exc:  # surfaces through the job to wait() and the log
                job.fail(exc)
            finally:
                self.cache.release(region)

    def _write(self, job: ShardJob, piece: Piece, region: Region) -> tuple[int, int, str]:
        view = self.cache.view(region, 0, piece.length)
        job.write_piece(view, piece.offset)
        # the bytes the file got, hashed where they sit (the region is released only after this);
        # pieces are hashed in parallel by the writer threads, never on the training thread
        return piece.offset, piece.length, hashlib.sha256(view).hexdigest()


def lower_priority(increment: int) -> None:
    """Run the calling (background) thread `increment` nice levels below training.

    Checkpoint writing only borrows CPU (checksums, syscalls); when training keeps every core busy
    the scheduler should favour training. Linux applies `setpriority` to a single thread.
    """
    if increment > 0 and hasattr(os, "setpriority") and hasattr(threading, "get_native_id"):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(),
                           min(19, os.getpriority(os.PRIO_PROCESS, 0) + increment))
