"""Per-GPU readings: the metric names the agent sends, NVML's readers, and the simulated model.

The GPU backends (nodeagent.gpus) call into this module from their `sample` methods, so the
backends stay small and fault injection can live beside them. A reading is a dict
{metric name: value}; a metric the device cannot report (NVML "Not Supported") is absent,
never zero, so a chart shows a gap instead of a false value.
"""

from __future__ import annotations

import math
import random
import time
import zlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

GpuReading = dict[str, float]

# Names on the wire (the console's monitoring.catalog describes each: unit, statistic, key).
GPU_UTILIZATION = "GPUUtilization"
GPU_MEMORY_UTILIZATION = "GPUMemoryUtilization"
GPU_MEMORY_USED = "GPUMemoryUsed"
GPU_MEMORY_TOTAL = "GPUMemoryTotal"
GPU_TEMPERATURE = "GPUTemperature"
GPU_POWER = "GPUPowerDraw"
GPU_SM_CLOCK = "GPUSMClock"
GPU_ECC_UNCORRECTED = "GPUECCErrorsUncorrected"
GPU_PCIE_RX = "GPUPCIeRxThroughput"
GPU_PCIE_TX = "GPUPCIeTxThroughput"
GPU_NVLINK_RX = "GPUNVLinkRxThroughput"
GPU_NVLINK_TX = "GPUNVLinkTxThroughput"
GPU_METRICS = (
    GPU_UTILIZATION, GPU_MEMORY_UTILIZATION, GPU_MEMORY_USED, GPU_MEMORY_TOTAL, GPU_TEMPERATURE, GPU_POWER,
    GPU_SM_CLOCK, GPU_ECC_UNCORRECTED, GPU_PCIE_RX, GPU_PCIE_TX, GPU_NVLINK_RX, GPU_NVLINK_TX,
)

GIB = 2**30
MB = 1e6


# -- NVML --------------------------------------------------------------------------------------
@dataclass
class NvlinkCounter:
    """NVML reports NVLink traffic as cumulative KiB counters: the rate needs the last reading."""

    last: dict[tuple[int, str], tuple[float, int]] = field(default_factory=dict)

    def rate(self, index: int, direction: str, now: float, kib: int) -> float | None:
        previous = self.last.get((index, direction))
        self.last[(index, direction)] = (now, kib)
        if previous is None or now <= previous[0] or kib < previous[1]:
            return None  # first reading, or the counter was reset (driver reload)
        return (kib - previous[1]) * 1024 / (now - previous[0]) / MB


def read_nvml(nvml: ModuleType, index: int, counter: NvlinkCounter, now: float) -> GpuReading:
    """Everything NVML offers for device `index`; each unsupported call is skipped on its own."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    reading: GpuReading = {}

    def read(names: tuple[str, ...], call: Callable[[], Any], convert: Callable[[Any], tuple[float, ...]]) -> None:
        try:
            values = convert(call())
        except Exception:  # NVMLError_NotSupported, _NoPermission, a GPU fallen off the bus, ...
            return
        reading.update(zip(names, values, strict=True))

    read((GPU_UTILIZATION, GPU_MEMORY_UTILIZATION), lambda: nvml.nvmlDeviceGetUtilizationRates(handle),
         lambda u: (float(u.gpu), float(u.memory)))
    read((GPU_MEMORY_USED, GPU_MEMORY_TOTAL), lambda: nvml.nvmlDeviceGetMemoryInfo(handle),
         lambda m: (m.used / GIB, m.total / GIB))
    read((GPU_TEMPERATURE,), lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
         lambda t: (float(t),))
    read((GPU_POWER,), lambda: nvml.nvmlDeviceGetPowerUsage(handle), lambda mw: (mw / 1000,))
    read((GPU_SM_CLOCK,), lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM), lambda c: (float(c),))
    read((GPU_ECC_UNCORRECTED,), lambda: nvml.nvmlDeviceGetTotalEccErrors(
        handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC), lambda n: (float(n),))
    # PCIe throughput is a rate already (KB/s over NVML's 20 ms window)
    read((GPU_PCIE_RX,), lambda: nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_RX_BYTES),
         lambda kb: (kb * 1000 / MB,))
    read((GPU_PCIE_TX,), lambda: nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_TX_BYTES),
         lambda kb: (kb * 1000 / MB,))
    reading.update(_nvlink(nvml, handle, index, counter, now))
    return reading


def _nvlink(nvml: ModuleType, handle: Any, index: int, counter: NvlinkCounter, now: float) -> GpuReading:
    """NVLink data throughput summed over the device's links (field values, one call)."""
    fields = {"rx": getattr(nvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", None),
              "tx": getattr(nvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", None)}
    links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
    if None in fields.values():
        return {}
    request = [(fields[d], link) for d in ("rx", "tx") for link in range(links)]
    try:
        values = nvml.nvmlDeviceGetFieldValues(handle, request)
    except Exception:  # no NVLink on this device (PCIe cards), or an old driver
        return {}
    totals: dict[str, int] = {}
    for (fid, _), value in zip(request, values, strict=False):
        if getattr(value, "nvmlReturn", 1) == 0:  # links that do not exist answer an error each
            direction = "rx" if fid == fields["rx"] else "tx"
            totals[direction] = totals.get(direction, 0) + int(value.value.ullVal)
    reading: GpuReading = {}
    for direction, name in (("rx", GPU_NVLINK_RX), ("tx", GPU_NVLINK_TX)):
        if direction in totals and (rate := counter.rate(index, direction, now, totals[direction])) is not None:
            reading[name] = rate
    return reading


# -- simulated -----------------------------------------------------------------------------------
TEMPERATURE_SECONDS = 20.0  # how fast a simulated die heats up and cools down (time constant)


@dataclass
class _SimState:
    temperature: float
    rng: random.Random
    at: float


class SimulatedSensors:
    """Plausible readings for simulated devices that follow what runs on them.

    A device whose placement's command runs is busy: most of its memory in use, and high
    utilisation, SM clock, power and PCIe/NVLink traffic as far as the command works (`load`: the
    share of a CPU it used, nodeagent.metrics; a command that sleeps leaves its GPUs near idle);
    otherwise it idles. The temperature
    moves towards the busy or idle level with a time constant, as a real die does, so a chart
    shows the job starting and ending. Noise is seeded by the device's UUID (repeatable).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.states: dict[str, _SimState] = {}

    def read(self, device: Any, busy: bool, load: float = 1.0) -> GpuReading:
        now = self.clock()
        state = self.states.get(device.uuid)
        if state is None:
            state = self.states[device.uuid] = _SimState(34.0, random.Random(zlib.crc32(device.uuid.encode())), now)
        load = min(1.0, max(0.0, load)) if busy else 0.0
        target = 34.0 + 37.0 * load
        state.temperature += (target - state.temperature) * (1 - math.exp(-max(0.0, now - state.at) / TEMPERATURE_SECONDS))
        state.at = now
        jitter = state.rng.uniform
        total = float(device.memory_gb)
        util = min(100.0, jitter(86, 100)) * load if busy else 0.0
        return {
            GPU_UTILIZATION: round(util, 1),
            GPU_MEMORY_UTILIZATION: round(jitter(38, 62), 1) if busy else 0.0,
            GPU_MEMORY_USED: round(total * jitter(0.74, 0.8) if busy else 0.45, 2),
            GPU_MEMORY_TOTAL: total,
            GPU_TEMPERATURE: round(state.temperature + jitter(-0.6, 0.6), 1),
            GPU_POWER: round(70 + 6.2 * util + jitter(-8, 8) if busy else jitter(66, 74), 1),
            GPU_SM_CLOCK: round(345.0 + 1635.0 * load, 1),
            # fault injection sets this on the device; a healthy simulated GPU has none
            GPU_ECC_UNCORRECTED: float(getattr(device, "ecc_uncorrected", 0) or 0),
            GPU_PCIE_RX: round(jitter(1500, 2600) * load, 1) if busy else round(jitter(0, 2), 2),
            GPU_PCIE_TX: round(jitter(600, 1200) * load, 1) if busy else round(jitter(0, 2), 2),
            GPU_NVLINK_RX: round(jitter(60_000, 140_000) * load, 0) if busy else 0.0,
            GPU_NVLINK_TX: round(jitter(60_000, 140_000) * load, 0) if busy else 0.0,
        }


def simulate(sensors: SimulatedSensors, devices: list[Any], busy: Collection[int],
             loads: Mapping[int, float] | None = None) -> dict[int, GpuReading]:
    """`loads`: per busy device, how hard its command works (0–1); a device without one works fully."""
    loads = loads or {}
    # a device that fell off the bus answers nothing, like NVML for a lost GPU: its charts show a gap
    return {
        device.index: sensors.read(device, device.index in busy, loads.get(device.index, 1.0))
        for device in devices if not getattr(device, "lost", False)
    }
