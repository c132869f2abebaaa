"""GPU probe: NVML where a GPU exists, a simulated backend where none does.

Both backends answer the same small interface so the rest of the agent never asks which one
it has, except for `real` (CUDA_VISIBLE_DEVICES and Docker device requests only make sense
for real devices). The simulated backend keeps one object per device so that metric sampling
and fault injection (XID codes, ECC errors, fallen off the bus) can be added to it later.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Protocol

from .gpu_metrics import GpuReading, NvlinkCounter, SimulatedSensors, read_nvml, simulate
from .protocol import GpuInfo

# how a simulated GPU's UUID starts (NVML's start "GPU-" and a hex UUID): the console labels
# such GPUs' figures as simulated
SIMULATED_UUID_PREFIX = "GPU-sim-"

# The GPU model each server type carries, for simulated nodes (the console's catalogue
# holds the same names; a real node reports what NVML says instead).
SERVER_TYPE_GPUS: dict[str, tuple[str, int]] = {
    "g2": ("NVIDIA H100 SXM", 80),
    "g3": ("NVIDIA B300 SXM", 288),
}


class GpuProbeError(Exception):
    """No GPU backend could be opened; the message tells the operator what to pass instead."""


class GpuBackend(Protocol):
    real: bool

    def gpus(self) -> list[GpuInfo]: ...

    def close(self) -> None: ...

    def sample(self, busy: Collection[int], loads: Mapping[int, float] | None = None) -> dict[int, GpuReading]:
        """One reading per device index; `busy` are the indices a training command runs on now,
        `loads` how hard it works on each (0–1; nodeagent.metrics), for a model without hardware."""
        ...


@dataclass
class SimulatedGpu:
    index: int
    uuid: str
    model: str
    memory_gb: int
    lost: bool = False  # fallen off the bus (injected gpu_lost / XID 79)
    faults: list[str] = field(default_factory=list)  # injected so far, newest last

    def info(self) -> GpuInfo:
        return GpuInfo(index=self.index, uuid=self.uuid, model=self.model, memory_gb=self.memory_gb)


class SimulatedBackend:
    """N GPUs of the server type's model; nothing runs on them (CUDA is not touched)."""

    real = False

    def __init__(self, node_name: str, count: int, server_type: str) -> None:
        if server_type not in SERVER_TYPE_GPUS:
            known = ", ".join(sorted(SERVER_TYPE_GPUS))
            raise GpuProbeError(f"no simulated GPU model for server type {server_type!r} (known: {known})")
        model, memory_gb = SERVER_TYPE_GPUS[server_type]
        self.devices = [SimulatedGpu(i, f"{SIMULATED_UUID_PREFIX}{node_name}-{i}", model, memory_gb) for i in range(count)]

    def gpus(self) -> list[GpuInfo]:
        return [device.info() for device in self.devices]

    def close(self) -> None:
        pass

    # -- metric sampling (the model lives in nodeagent.gpu_metrics) -----------------------------
    _sensors: SimulatedSensors | None = None  # created on the first sample

    def sample(self, busy: Collection[int], loads: Mapping[int, float] | None = None) -> dict[int, GpuReading]:
        """Readings that follow the job: busy devices work as hard as their command, the others idle."""
        if self._sensors is None:
            self._sensors = SimulatedSensors()
        return simulate(self._sensors, self.devices, busy, loads)


class NvmlBackend:
    """Real GPUs through nvidia-ml-py (`import pynvml`); `nvml` is injectable for tests."""

    real = True

    def __init__(self, nvml: ModuleType | None = None) -> None:
        self.nvml: ModuleType = nvml if nvml is not None else _import_nvml()
        try:
            self.nvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
            raise GpuProbeError(
                f"NVML did not initialise ({exc}); this machine has no usable NVIDIA driver. "
                "Pass --gpus simulated:N to run with N simulated GPUs."
            ) from exc

    def gpus(self) -> list[GpuInfo]:
        nvml = self.nvml
        result: list[GpuInfo] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            total = nvml.nvmlDeviceGetMemoryInfo(handle).total
            result.append(GpuInfo(
                index=index, uuid=_text(nvml.nvmlDeviceGetUUID(handle)), model=_text(nvml.nvmlDeviceGetName(handle)),
                memory_gb=round(total / 2**30),
            ))
        return result

    def close(self) -> None:
        # shutting down twice or after a driver fault must not crash the exit path
        with contextlib.suppress(Exception):
            self.nvml.nvmlShutdown()

    # -- metric sampling (the readers live in nodeagent.gpu_metrics) ----------------------------
    _nvlink: NvlinkCounter | None = None  # NVLink counters are cumulative: rates need the last one

    def sample(self, busy: Collection[int], loads: Mapping[int, float] | None = None) -> dict[int, GpuReading]:
        """What NVML reports for every device (`busy` and `loads` are not needed: the hardware knows)."""
        if self._nvlink is None:
            self._nvlink = NvlinkCounter()
        now = time.monotonic()
        return {index: read_nvml(self.nvml, index, self._nvlink, now) for index in range(self.nvml.nvmlDeviceGetCount())}


def _import_nvml() -> ModuleType:
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:  # nvidia-ml-py missing from this environment
        raise GpuProbeError(f"cannot import pynvml (pip install nvidia-ml-py): {exc}") from exc


def _text(value: str | bytes) -> str:
    # older nvidia-ml-py releases return bytes
    return value.decode() if isinstance(value, bytes) else value


def open_backend(spec: str, node_name: str, server_type: str, nvml: ModuleType | None = None) -> GpuBackend:
    """`spec` is the --gpus value: auto | nvml | simulated:N."""
    if spec.startswith("simulated:"):
        return SimulatedBackend(node_name, int(spec.partition(":")[2]), server_type)
    if spec not in ("auto", "nvml"):
        raise GpuProbeError(f"unknown --gpus value {spec!r}: use auto, nvml or simulated:N")
    return NvmlBackend(nvml)
