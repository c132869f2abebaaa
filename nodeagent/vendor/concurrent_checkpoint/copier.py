"""Copying a snapshot's tensors into the host cache: eagerly, or lazily in the background.

Eager: `save()` returns once every byte sits in the host cache (on CUDA the device-to-host
copies run on a side stream and `save()` waits for them).

Lazy: the copies run while training continues (CUDA: a side stream overlapping the next forward
and backward pass; CPU: one copy thread). Parameters and optimizer state do not change until the
next `optimizer.step()`, so the engine waits for the copies only there (an optimizer step
pre-hook). A tensor changed in between (e.g. BatchNorm running statistics updated in the forward
pass) is detected through its version counter and the checkpoint is discarded, never committed torn.
"""

from __future__ import annotations

import queue
import threading
from typing import Protocol

import torch

from .host_cache import HostCache, Region
from .snapshot import Piece, Snapshot


class Ready(Protocol):
    def wait(self) -> None: ...


class Done:
    """Eager copies: the bytes are in place already."""

    def wait(self) -> None:
        return None


class ThreadReady:
    def __init__(self) -> None:
        self._event = threading.Event()
        self.error: BaseException | None = None

    def set(self, error: BaseException | None = None) -> None:
        self.error = error
        self._event.set()

    def wait(self) -> None:
        self._event.wait()
        if self.error is not None:
            raise self.error


class CudaReady:
    def __init__(self, event: torch.cuda.Event) -> None:
        self._event = event

    def wait(self) -> None:
        self._event.synchronize()


def copy_piece(cache: HostCache, snapshot: Snapshot, piece: Piece, region: Region,
               non_blocking: bool = False) -> None:
    """Copy the piece's tensor ranges into its region; zero the alignment gaps (files are
    deterministic and old cache contents never reach a file)."""
    dst = cache.tensor(region)
    position = 0
    with torch.no_grad():
        for seg in piece.segments:
            if seg.rel > position:
                dst[position:seg.rel].zero_()
            src = snapshot.tensors[seg.tensor][seg.lo:seg.hi]
            end = seg.rel + (seg.hi - seg.lo)
            dst[seg.rel:end].copy_(src, non_blocking=non_blocking and src.is_cuda)
            position = end
        if position < piece.length:
            dst[position:piece.length].zero_()


class CopyBatch:
    """The copies of one `save()`: lets the engine wait for them and check nothing changed."""

    def __init__(self, snapshot: Snapshot, versions: list[int] | None) -> None:
        self.snapshot = snapshot
        self.readies: list[Ready] = []
        self._versions = versions

    def wait(self) -> None:
        for ready in self.readies:
            ready.wait()

    def changed_tensors(self) -> int:
        """How many sources were modified in place after `save()` returned (lazy mode only)."""
        if self._versions is None:
            return 0
        originals = self.snapshot.originals
        return sum(1 for t, v in zip(originals, self._versions, strict=True) if t._version != v)


class Copier:
    """Issues the copies of pieces; one side stream per CUDA device, one CPU copy thread."""

    def __init__(self, cache: HostCache, lazy: bool) -> None:
        self.cache = cache
        self.lazy = lazy
        self._streams: dict[torch.device, torch.cuda.Stream] = {}
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None

    def begin(self, snapshot: Snapshot, originals: list[torch.Tensor]) -> CopyBatch:
        versions = [t._version for t in originals] if self.lazy else None
        batch = CopyBatch(snapshot, versions)
        for device in {t.device for t in snapshot.tensors if t.is_cuda}:
            stream = self._stream(device)
            # copies must see the results of everything already queued (the optimizer step)
            stream.wait_stream(torch.cuda.current_stream(device))
        return batch

    def copy(self, batch: CopyBatch, piece: Piece, region: Region) -> Ready:
        snapshot = batch.snapshot
        cuda_devices = {snapshot.tensors[s.tensor].device for s in piece.segments
                        if snapshot.tensors[s.tensor].is_cuda}
        if cuda_devices:
            ready = self._copy_cuda(snapshot, piece, region, cuda_devices)
        elif self.lazy:
            ready = self._copy_in_thread(snapshot, piece, region)
        else:
            copy_piece(self.cache, snapshot, piece, region)
            ready = Done()
        batch.readies.append(ready)
        return ready

    def finish(self, batch: CopyBatch) -> None:
        """Eager mode: wait for the device-to-host copies before `save()` returns."""
        if not self.lazy:
            batch.wait()

    def close(self) -> None:
        if self._thread is not None and self._queue is not None:
            self._queue.put(None)
            self._thread.join(timeout=60)
            self._thread = None

    def _stream(self, device: torch.device) -> torch.cuda.Stream:
        if device not in self._streams:
            self._streams[device] = torch.cuda.Stream(device=device)
        return self._streams[device]

    def _copy_cuda(self, snapshot: Snapshot, piece: Piece, region: Region,
                   devices: set[torch.device]) -> Ready:
        if len(devices) > 1:  # rare (one process, several GPUs): copy synchronously
            copy_piece(self.cache, snapshot, piece, region)
            return Done()
        stream = self._stream(next(iter(devices)))
        with torch.cuda.stream(stream):
            copy_piece(self.cache, snapshot, piece, region, non_blocking=self.cache.pinned)
            for seg in piece.segments:
                # the caching allocator must not hand this memory out before the copy ran
                snapshot.tensors[seg.tensor].record_stream(stream)
            event = torch.cuda.Event()
            event.record(stream)
        return CudaReady(event)

    def _copy_in_thread(self, snapshot: Snapshot, piece: Piece, region: Region) -> Ready:
        if self._thread is None:
            self._queue = queue.Queue()
            self._thread = threading.Thread(target=self._copy_loop, name="ckpt-copy", daemon=True)
            self._thread.start()
        ready = ThreadReady()
        assert self._queue is not None
        self._queue.put((snapshot, piece, region, ready))
        return ready

    def _copy_loop(self) -> None:
        assert self._queue is not None
        while (task := self._queue.get()) is not None:
            snapshot, piece, region, ready = task
            try:
                copy_piece(self.cache, snapshot, piece, region)
                ready.set()
            except BaseException as exc:  # reported to the writer through `ready`
                ready.set(exc)
