"""Node readings from /proc (Linux): CPU, memory, disk and network throughput, disk space.

No psutil: the few counters we need are plain text. The parsers take the file's text so the
tests feed them fixed snapshots. Rates (CPU %, bytes/s) need two readings: the first call of
`NodeStats.read` only records counters and returns the instantaneous values (memory, space).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

NODE_CPU = "NodeCPUUtilization"
NODE_MEMORY_UTILIZATION = "NodeMemoryUtilization"
NODE_MEMORY_USED = "NodeMemoryUsed"
NODE_DISK_READ = "NodeDiskReadThroughput"
NODE_DISK_WRITE = "NodeDiskWriteThroughput"
NODE_DISK_SPACE = "NodeDiskSpaceUtilization"
NODE_NET_RX = "NodeNetworkRxThroughput"
NODE_NET_TX = "NodeNetworkTxThroughput"
NODE_METRICS = (
    NODE_CPU, NODE_MEMORY_UTILIZATION, NODE_MEMORY_USED, NODE_DISK_READ, NODE_DISK_WRITE, NODE_DISK_SPACE,
    NODE_NET_RX, NODE_NET_TX,
)

MB = 1e6
GIB = 2**30
SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's block size
# virtual interfaces carry traffic a physical one also counts (containers, bridges)
_VIRTUAL_NET = re.compile(r"^(lo|veth|docker|br-|virbr|cni|flannel|cali|tun|tap)")


@dataclass(frozen=True)
class Counters:
    at: float
    cpu_busy: int
    cpu_total: int
    disk_read: int  # bytes
    disk_write: int
    net_rx: int
    net_tx: int


def parse_cpu(stat: str) -> tuple[int, int]:
    """(busy, total) jiffies from the `cpu` line of /proc/stat; iowait counts as idle."""
    for line in stat.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            idle = values[3] + (values[4] if len(values) > 4 else 0)
            # guest time is already inside user/nice: count only the first 8 fields
            total = sum(values[:8])
            return total - idle, total
    raise ValueError("no cpu line in /proc/stat")


def parse_meminfo(meminfo: str) -> tuple[float, float]:
    """(used bytes, total bytes); used = total − available (what the kernel could free is free)."""
    fields = {}
    for line in meminfo.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            fields[name] = int(parts[0]) * 1024  # kB
    total = fields["MemTotal"]
    available = fields.get("MemAvailable", fields.get("MemFree", 0))
    return float(total - available), float(total)


def parse_diskstats(diskstats: str, disks: set[str]) -> tuple[int, int]:
    """(bytes read, bytes written) summed over whole disks (partitions would count twice)."""
    read = written = 0
    for line in diskstats.splitlines():
        parts = line.split()
        if len(parts) >= 10 and parts[2] in disks:
            read += int(parts[5]) * SECTOR
            written += int(parts[9]) * SECTOR
    return read, written


def parse_net_dev(net_dev: str) -> tuple[int, int]:
    """(bytes received, bytes sent) over physical interfaces."""
    rx = tx = 0
    for line in net_dev.splitlines()[2:]:
        name, _, rest = line.partition(":")
        name = name.strip()
        parts = rest.split()
        if len(parts) >= 9 and not _VIRTUAL_NET.match(name):
            rx += int(parts[0])
            tx += int(parts[8])
    return rx, tx


def physical_disks(sys_block: Path = Path("/sys/block")) -> set[str]:
    """Block devices backed by hardware (loop, ram, dm-* and zram have no `device` link)."""
    try:
        return {entry.name for entry in sys_block.iterdir() if (entry / "device").exists()}
    except OSError:
        return set()


def rates(previous: Counters, current: Counters) -> dict[str, float]:
    seconds = current.at - previous.at
    values: dict[str, float] = {}
    if current.cpu_total > previous.cpu_total:
        values[NODE_CPU] = round(100 * (current.cpu_busy - previous.cpu_busy) / (current.cpu_total - previous.cpu_total), 2)
    if seconds > 0:
        for name, now, before in (
            (NODE_DISK_READ, current.disk_read, previous.disk_read), (NODE_DISK_WRITE, current.disk_write, previous.disk_write),
            (NODE_NET_RX, current.net_rx, previous.net_rx), (NODE_NET_TX, current.net_tx, previous.net_tx),
        ):
            if now >= before:  # a counter that went backwards (device removed) gives no rate
                values[name] = round((now - before) / seconds / MB, 3)
    return values


class NodeStats:
    def __init__(self, disk_path: Path, proc: Path = Path("/proc"), clock: Callable[[], float] = time.monotonic) -> None:
        self.disk_path, self.proc, self.clock = disk_path, proc, clock
        self.disks = physical_disks()
        self.previous: Counters | None = None

    def _counters(self) -> Counters:
        busy, total = parse_cpu((self.proc / "stat").read_text())
        read, written = parse_diskstats((self.proc / "diskstats").read_text(), self.disks)
        rx, tx = parse_net_dev((self.proc / "net" / "dev").read_text())
        return Counters(self.clock(), busy, total, read, written, rx, tx)

    def read(self) -> dict[str, float]:
        """Every node metric this machine offers now; a file that cannot be read is skipped."""
        values: dict[str, float] = {}
        try:
            used, total = parse_meminfo((self.proc / "meminfo").read_text())
            values[NODE_MEMORY_USED] = round(used / GIB, 3)
            values[NODE_MEMORY_UTILIZATION] = round(100 * used / total, 2)
        except (OSError, KeyError, ValueError, ZeroDivisionError):
            pass
        try:
            space = os.statvfs(self.disk_path)
            if space.f_blocks:
                values[NODE_DISK_SPACE] = round(100 * (1 - space.f_bavail / space.f_blocks), 2)
        except OSError:
            pass
        try:
            current = self._counters()
        except (OSError, ValueError, IndexError):  # not Linux, or a /proc we cannot parse
            return values
        if self.previous is not None:
            values.update(rates(self.previous, current))
        self.previous = current
        return values
