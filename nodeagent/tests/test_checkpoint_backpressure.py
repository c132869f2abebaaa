"""Back-pressure: with a host cache smaller than two checkpoints, `save` waits; memory stays bounded."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import torch

from nodeagent.tests.checkpoint_scripts import support

support.vendor_on_path()
from concurrent_checkpoint import CheckpointEngine, writer  # noqa: E402

MiB = 1 << 20
STATE_MB = 16


@pytest.fixture
def slow_disk(monkeypatch):
    """About 40 MB/s: slower than the saves below, as a busy network filesystem can be."""
    original = writer.pwrite_all

    def slow(fd, data, offset):
        time.sleep(len(data) / (40 * MiB))
        original(fd, data, offset)

    monkeypatch.setattr(writer, "pwrite_all", slow)


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * 4096


def state(step: int) -> dict:
    return {"w": torch.full((STATE_MB * MiB // 4,), float(step)), "step": step}


def test_a_full_cache_makes_save_wait_and_says_so(tmp_path, monkeypatch, caplog):
    disk_ready = threading.Event()  # nothing reaches the disk until the test says so
    original = writer.pwrite_all
    monkeypatch.setattr(writer, "pwrite_all", lambda *args: (disk_ready.wait(), original(*args)))
    engine = CheckpointEngine(tmp_path, host_cache_size=1.5 * STATE_MB / 1024, piece_mb=2)
    second: list = []

    with caplog.at_level(logging.WARNING, logger="concurrent_checkpoint"):
        first = engine.save(1, state(1))  # fits in the cache: returns although nothing is written
        saving = threading.Thread(target=lambda: second.append(engine.save(2, state(2))))
        saving.start()
        saving.join(timeout=0.5)
        waited_for_disk = saving.is_alive()
        disk_ready.set()
        saving.join(timeout=30)
    engine.close()

    assert first.backpressure_seconds == 0
    assert waited_for_disk and second[0].backpressure_seconds >= 0.4
    assert engine.stats.backpressure_waits == 1
    assert any("host cache full" in r.getMessage() and "step 2" in r.getMessage() for r in caplog.records)
    assert torch.equal(CheckpointEngine(tmp_path).load(2).state["w"], state(2)["w"])


def test_memory_stays_bounded_while_saves_outrun_the_disk(tmp_path, slow_disk):
    cache_mb = 24
    weights = torch.zeros(STATE_MB * MiB // 4)  # changed in place between saves, like parameters
    engine = CheckpointEngine(tmp_path, host_cache_size=cache_mb / 1024, piece_mb=2, keep_last=2)
    engine.save(0, {"w": weights})
    baseline = rss_bytes()  # the cache is allocated (and touched) at the first save

    growth = []
    for step in range(1, 9):  # 8 x 16 MB handed over far faster than the disk takes them
        weights.fill_(float(step))
        engine.save(step, {"w": weights})
        growth.append(rss_bytes() - baseline)
    engine.close()

    assert engine.stats.backpressure_waits >= 4
    # copies queued without a bound would add ~16 MB per save; the one cache holds them all
    assert max(growth) < 4 * MiB, [g // MiB for g in growth]
    engine = CheckpointEngine(tmp_path)
    assert engine.complete_steps() == [7, 8]
    assert torch.equal(engine.load(7).state["w"], torch.full_like(weights, 7.0))
