"""Hardware-fault detection on the node, and fault injection into simulated GPUs.

Real GPUs: NVML's XID critical-error events, uncorrected volatile ECC counters, row-remap
pending/failure flags, NVLink error counters, `NVMLError_GpuIsLost`, a GPU missing from the
device count, and the driver's recommended recovery action — each reported once, as it
happens, with the GPU index. Simulated GPUs: the same events, injected on demand (the
console's `inject_fault` message), with the consequence a real fault has: a process on a GPU
that fell off the bus (or hit a fatal XID) dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .gpus import GpuBackend, NvmlBackend, SimulatedBackend
from .protocol import FAULT_KINDS

log = logging.getLogger(__name__)

FaultSink = Callable[[dict[str, Any]], None]  # receives {gpu_index, kind, xid, detail, ts}
CrashGpu = Callable[[int, str], None]  # kills what runs on a GPU (simulation only)

# Simulated consequences: these faults crash a process using the GPU (as the CUDA runtime
# would); 63/92 (degrading) and a pending remap or recovery hint leave it running.
NON_CRASHING_XIDS = frozenset({63, 92})
CRASHING_KINDS = frozenset({"gpu_lost", "ecc_uncorrected", "row_remap_failure", "nvlink"})
POLL_SECONDS = 2.0


class InvalidFault(ValueError):
    """An injection request that cannot be applied (unknown kind, no such GPU, real GPUs)."""


def fault_event(kind: str, gpu_index: int | None, xid: int | None = None, detail: str = "") -> dict[str, Any]:
    return {"gpu_index": gpu_index, "kind": kind, "xid": xid, "detail": detail, "ts": time.time()}


class SimulatedFaults:
    """Fault injection for a SimulatedBackend: state on the devices, events out, crashes."""

    def __init__(self, backend: SimulatedBackend, emit: FaultSink, crash: CrashGpu) -> None:
        self.backend, self.emit, self.crash = backend, emit, crash

    def inject(self, kind: str, gpu_index: int | None, xid: int | None = None, detail: str = "") -> dict[str, Any]:
        if kind not in FAULT_KINDS:
            raise InvalidFault(f"unknown fault kind {kind!r} (known: {', '.join(FAULT_KINDS)})")
        indices = {device.index for device in self.backend.devices}
        if gpu_index is not None and gpu_index not in indices:
            raise InvalidFault(f"this node has no GPU {gpu_index} (it has {len(indices)})")
        if kind == "xid" and not isinstance(xid, int):
            raise InvalidFault("an XID fault needs its XID number")
        device = next((d for d in self.backend.devices if d.index == gpu_index), None)
        if device is not None:
            device.faults.append(kind if kind != "xid" else f"xid {xid}")
            if kind == "gpu_lost" or (kind == "xid" and xid == 79):
                device.lost = True
        event = fault_event(kind, gpu_index, xid, detail or "injected")
        self.emit(event)
        crashes = kind in CRASHING_KINDS or (kind == "xid" and xid not in NON_CRASHING_XIDS)
        if crashes and gpu_index is not None:
            self.crash(gpu_index, f"{'XID ' + str(xid) if kind == 'xid' else kind.replace('_', ' ')} on GPU {gpu_index}")
        return event


class NvmlFaultWatcher:
    """Polls NVML in a thread; XID events arrive through an event set, counters by polling."""

    def __init__(self, backend: NvmlBackend, emit: FaultSink, interval: float = POLL_SECONDS) -> None:
        self.nvml: ModuleType = backend.nvml
        self.emit, self.interval = emit, interval
        self.count = self.nvml.nvmlDeviceGetCount()
        self.seen_ecc: dict[int, int] = {}
        self.reported: set[tuple[int | None, str]] = set()
        self.stop = threading.Event()
        self.event_set = None
        with contextlib.suppress(Exception):  # not every GPU/driver supports XID events
            self.event_set = self.nvml.nvmlEventSetCreate()
            for index in range(self.count):
                handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
                with contextlib.suppress(Exception):
                    self.nvml.nvmlDeviceRegisterEvents(handle, self.nvml.nvmlEventTypeXidCriticalError, self.event_set)
        for index in range(self.count):
            self.seen_ecc[index] = self._ecc(index) or 0

    def _once(self, gpu: int | None, kind: str, **fields: Any) -> None:
        if (gpu, kind) not in self.reported:  # a standing condition is one event, not one per poll
            self.reported.add((gpu, kind))
            self.emit(fault_event(kind, gpu, **fields))

    def _ecc(self, index: int) -> int | None:
        nvml = self.nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            return int(nvml.nvmlDeviceGetTotalEccErrors(handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC))
        except Exception:
            return None

    def poll(self) -> None:
        """One pass over every device (called every `interval` seconds from the thread)."""
        nvml = self.nvml
        try:
            count = nvml.nvmlDeviceGetCount()
        except Exception as exc:
            count = self.count
            if "GpuIsLost" in type(exc).__name__:
                self._once(None, "gpu_lost", detail=str(exc))
        if count < self.count:
            self._once(None, "gpu_missing", detail=f"{count} of {self.count} GPUs visible")
        for index in range(min(count, self.count)):
            self._poll_device(index)

    def _poll_device(self, index: int) -> None:
        nvml = self.nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            ecc = self._ecc(index)
            if ecc is not None and ecc > self.seen_ecc.get(index, 0):
                self.emit(fault_event("ecc_uncorrected", index, detail=f"uncorrected volatile ECC {self.seen_ecc.get(index, 0)} → {ecc}"))
                self.seen_ecc[index] = ecc
            with contextlib.suppress(Exception):
                _, _, pending, failed = nvml.nvmlDeviceGetRemappedRows(handle)
                if failed:
                    self._once(index, "row_remap_failure")
                elif pending:
                    self._once(index, "row_remap_pending")
            with contextlib.suppress(Exception):
                action = self._recovery_action(handle)
                if action:
                    self._once(index, "recovery_action", detail=f"driver recommends action {action}")
        except Exception as exc:
            if "GpuIsLost" in type(exc).__name__:
                self._once(index, "gpu_lost", detail=str(exc))
            else:
                log.debug("NVML poll of GPU %s failed: %s", index, exc)

    def _recovery_action(self, handle: Any) -> int:
        nvml = self.nvml
        field = getattr(nvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
        if field is None:
            return 0
        [value] = nvml.nvmlDeviceGetFieldValues(handle, [field])
        return int(getattr(value.value, "uiVal", 0) or 0)

    def wait_for_xid(self, timeout_ms: int) -> None:
        if self.event_set is None:
            time.sleep(timeout_ms / 1000)
            return
        nvml = self.nvml
        try:
            data = nvml.nvmlEventSetWait_v2(self.event_set, timeout_ms)
        except Exception as exc:  # NVMLError_Timeout: nothing happened
            if "Timeout" not in type(exc).__name__:
                time.sleep(timeout_ms / 1000)
            return
        index = None
        with contextlib.suppress(Exception):
            index = nvml.nvmlDeviceGetIndex(data.device)
        self.emit(fault_event("xid", index, xid=int(data.eventData)))

    def run(self) -> None:
        last_poll = 0.0
        while not self.stop.is_set():
            self.wait_for_xid(int(self.interval * 1000))
            if time.monotonic() - last_poll >= self.interval:
                self.poll()
                last_poll = time.monotonic()


class FaultMonitor:
    """What the agent starts: injection for simulated GPUs, a watcher thread for NVML."""

    def __init__(self, backend: GpuBackend, emit: FaultSink, crash: CrashGpu) -> None:
        self.simulated = SimulatedFaults(backend, emit, crash) if isinstance(backend, SimulatedBackend) else None
        self.watcher = NvmlFaultWatcher(backend, emit) if isinstance(backend, NvmlBackend) else None

    def inject(self, kind: str, gpu_index: int | None, xid: int | None = None, detail: str = "") -> dict[str, Any]:
        if self.simulated is None:
            raise InvalidFault("faults can only be injected into simulated GPUs")
        return self.simulated.inject(kind, gpu_index, xid, detail)

    async def run(self) -> None:
        if self.watcher is None:
            return
        try:
            await asyncio.to_thread(self.watcher.run)
        finally:
            self.watcher.stop.set()
