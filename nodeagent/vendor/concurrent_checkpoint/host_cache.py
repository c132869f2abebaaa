"""The host cache: one buffer allocated once and handed out as a FIFO ring.

`allocate` blocks while the ring is full. That is the back-pressure: when storage cannot keep up
with the checkpoint rate, `save()` waits for earlier pieces to be written instead of letting
host memory grow without bound.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

PAGE = 4096  # regions start on a page: any dtype can be viewed in place and O_DIRECT can write them
ALIGN = PAGE


def align_up(value: int, alignment: int = ALIGN) -> int:
    return (value + alignment - 1) // alignment * alignment


@dataclass(eq=False)
class Region:
    start: int
    size: int
    freed: bool = False

    @property
    def end(self) -> int:
        return self.start + self.size


class HostCache:
    """A ring allocator over one host buffer (page-locked when asked and CUDA is present)."""

    def __init__(self, capacity: int, pin: bool = False) -> None:
        capacity = align_up(max(capacity, ALIGN))
        self.pinned = bool(pin and torch.cuda.is_available())
        raw = torch.empty(capacity + PAGE, dtype=torch.uint8, pin_memory=self.pinned)
        skip = -raw.data_ptr() % PAGE
        self.buffer = raw[skip:skip + capacity]
        if not self.pinned:
            # Touch every page now: page faults during a save would be paid as training stall.
            self.buffer.zero_()
        self.array: np.ndarray = self.buffer.numpy()
        self.capacity = capacity
        self._blocks: deque[Region] = deque()
        self._cond = threading.Condition()
        self._closed = False

    def allocate(self, nbytes: int, abort: Callable[[], BaseException | None] | None = None
                 ) -> tuple[Region, float]:
        """Reserve `nbytes` (rounded up to ALIGN); returns the region and the seconds spent waiting."""
        size = align_up(max(nbytes, 1))
        if size > self.capacity:
            raise ValueError(f"piece of {size} bytes exceeds host cache of {self.capacity} bytes")
        waited_from: float | None = None
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("host cache is closed")
                start = self._find(size)
                if start is not None:
                    region = Region(start, size)
                    self._blocks.append(region)
                    waited = 0.0 if waited_from is None else time.perf_counter() - waited_from
                    return region, waited
                if abort is not None and (error := abort()) is not None:
                    raise error
                if waited_from is None:
                    waited_from = time.perf_counter()
                self._cond.wait(timeout=0.5)

    def try_allocate(self, nbytes: int) -> Region | None:
        """Like `allocate`, but None instead of waiting when the ring is full."""
        size = align_up(max(nbytes, 1))
        with self._cond:
            start = self._find(size) if size <= self.capacity else None
            if start is None:
                return None
            region = Region(start, size)
            self._blocks.append(region)
            return region

    def release(self, region: Region) -> None:
        with self._cond:
            region.freed = True
            while self._blocks and self._blocks[0].freed:
                self._blocks.popleft()
            self._cond.notify_all()

    def tensor(self, region: Region) -> torch.Tensor:
        return self.buffer[region.start:region.end]

    def view(self, region: Region, offset: int, length: int) -> memoryview:
        start = region.start + offset
        return memoryview(self.array[start:start + length])

    @property
    def in_use(self) -> int:
        with self._cond:
            return sum(b.size for b in self._blocks if not b.freed)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _find(self, size: int) -> int | None:
        """Where a block of `size` fits after the newest block without overtaking the oldest."""
        if not self._blocks:
            return 0
        oldest, newest = self._blocks[0], self._blocks[-1]
        if newest.start >= oldest.start:  # live blocks do not wrap: room at the end, then the start
            if newest.end + size <= self.capacity:
                return newest.end
            if size <= oldest.start:
                return 0
            return None
        if newest.end + size <= oldest.start:  # wrapped: the only room is between newest and oldest
            return newest.end
        return None
