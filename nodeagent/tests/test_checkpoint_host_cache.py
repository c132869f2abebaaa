"""The host cache ring: regions never overlap, space comes back in FIFO order, a full ring blocks."""

from __future__ import annotations

import random
import threading
import time

import pytest

from nodeagent.tests.checkpoint_scripts import support

support.vendor_on_path()
from concurrent_checkpoint.host_cache import ALIGN, PAGE, HostCache  # noqa: E402


def test_live_regions_never_overlap_when_writers_finish_out_of_order():
    cache = HostCache(32 * PAGE)
    rng = random.Random(0)
    live = []
    allocated = 0
    for _ in range(5000):
        if live and rng.random() < 0.4:
            cache.release(live.pop(rng.randrange(len(live))))
            continue
        region = cache.try_allocate(rng.randint(1, 3 * PAGE))
        if region is None:
            continue
        allocated += 1
        assert region.start % ALIGN == 0 and region.end <= cache.capacity
        assert all(region.end <= other.start or other.end <= region.start for other in live)
        live.append(region)
    assert allocated > 1000  # space released out of order was reused


def test_a_full_cache_blocks_until_the_oldest_region_is_released():
    cache = HostCache(4 * PAGE)
    first, _ = cache.allocate(2 * PAGE)
    second, _ = cache.allocate(2 * PAGE)
    got = []
    waiter = threading.Thread(target=lambda: got.append(cache.allocate(PAGE)))
    waiter.start()
    time.sleep(0.2)
    blocked = not got

    cache.release(second)  # not the oldest: the ring cannot reuse it yet
    time.sleep(0.2)
    still_blocked = not got
    cache.release(first)
    waiter.join(timeout=5)

    assert blocked and still_blocked
    region, waited = got[0]
    assert region.start == 0 and waited > 0.1


def test_a_piece_larger_than_the_cache_is_refused():
    with pytest.raises(ValueError, match="exceeds host cache"):
        HostCache(4 * PAGE).allocate(8 * PAGE)
