"""The sampling loop: every `--metrics-interval` seconds, one `metrics` message per node.

Each tick reads every GPU (NVML or the simulated model) and the node's /proc counters and
spools one batch, so samples take the same road as log lines: msg_id, fsync before send,
re-sent after a reconnect until acknowledged, stored once by the console.

Dimensions: a GPU sample names its `gpu` index and, while a placement holds that GPU, the
`job`; node samples have none (the console adds the node from the connection).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .gpus import GpuBackend
from .logstream import Outbox
from .node_stats import NodeStats
from .supervisor import Supervisor

log = logging.getLogger(__name__)
DEFAULT_INTERVAL = 10.0


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) of a process and its live descendants so far; None once gone."""
    from .runtimes.process import descendants

    total, ticks = 0.0, os.sysconf("SC_CLK_TCK")
    pids = [pid, *(child for child, _ in descendants(pid))]
    for each in pids:
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            if each == pid:
                return None
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def gpu_owners(supervisor: Supervisor) -> tuple[dict[int, int], set[int]]:
    """({gpu index: job id} for every placement this agent holds, {indices whose command runs})."""
    owners: dict[int, int] = {}
    busy: set[int] = set()
    for runner in list(supervisor.runners.values()):
        indices = runner.placement.get("gpu_indices") or []
        for index in indices:
            owners[index] = runner.placement["job_id"]
        if getattr(runner, "state", "") == "running":
            busy.update(indices)
    return owners, busy


class MetricsCollector:
    def __init__(
        self, gpus: GpuBackend, supervisor: Supervisor, outbox: Outbox, interval: float, disk_path: Path,
        clock: Callable[[], float] = time.time, cpu_seconds: Callable[[int], float | None] = tree_cpu_seconds,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gpus, self.supervisor, self.outbox = gpus, supervisor, outbox
        self.interval = interval
        self.node = NodeStats(disk_path)
        self.clock = clock
        self.cpu_seconds, self.monotonic = cpu_seconds, monotonic
        self._cpu: dict[Any, tuple[float, float, float]] = {}  # runner → (when, its command's CPU seconds then, share)

    def command_loads(self) -> dict[int, float]:
        """GPU index → how hard the command on it worked since the last tick: the CPU its process
        tree used per second, shared by its GPUs (0–1). Simulated GPUs follow it, so a script
        that sleeps does not show 95 % and 600 W. A command without a pid (a container) has none."""
        loads: dict[int, float] = {}
        now, seen = self.monotonic(), {}
        for key, runner in list(self.supervisor.runners.items()):
            pid = getattr(runner, "command_pid", None)
            if getattr(runner, "state", "") != "running" or not pid or (cpu := self.cpu_seconds(pid)) is None:
                continue
            then, before, share = self._cpu.get(key, (getattr(runner, "running_since", now), 0.0, 1.0))
            indices = runner.placement.get("gpu_indices") or []
            if now > then and indices:
                share = min(1.0, max(0.0, (cpu - before) / (now - then) / len(indices)))
                then, before = now, cpu
            seen[key] = (then, before, share)  # no time passed: the last share stands
            loads.update({int(index): float(share) for index in indices})
        self._cpu = seen
        return loads

    def sample(self) -> list[list[Any]]:
        """One tick's samples: [metric, ts, value, dimensions] each."""
        owners, busy = gpu_owners(self.supervisor)
        now = round(self.clock(), 3)
        samples: list[list[Any]] = []
        loads = self.command_loads() if not self.gpus.real else None
        for index, reading in sorted(self.gpus.sample(busy, loads).items()):
            dimensions: dict[str, Any] = {"gpu": index}
            if index in owners:
                dimensions["job"] = owners[index]
            samples.extend([name, now, value, dimensions] for name, value in reading.items())
        samples.extend([name, now, value, {}] for name, value in self.node.read().items())
        return samples

    async def run(self) -> None:
        """Sample on a fixed schedule until cancelled; a failing tick is logged and skipped."""
        if self.interval <= 0:
            return  # --metrics-interval 0 turns collection off
        self.node.read()  # the counters the first rates are measured against
        loop = asyncio.get_running_loop()
        next_at = loop.time() + self.interval
        while True:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            # a slow tick (NVML stuck on a sick GPU) skips ticks instead of bunching them up
            next_at = max(next_at + self.interval, loop.time())
            try:
                # off the event loop: NVML can take seconds to answer for a sick GPU
                samples = await asyncio.to_thread(self.sample)
            except Exception:  # a sampling bug must not stop the agent or its jobs
                log.exception("metric sampling failed")
                continue
            if samples:
                self.outbox.metrics(samples)
