"""GPU probe: NVML (through a fake pynvml module) and the simulated backend."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from nodeagent.gpus import GpuProbeError, NvmlBackend, SimulatedBackend, open_backend


class FakeNvml:
    """The few pynvml calls the probe makes, for a node with two H100s."""

    class NVMLError(Exception):
        pass

    def __init__(self, fail_init: bool = False) -> None:
        self.fail_init = fail_init
        self.shutdowns = 0

    def nvmlInit(self):
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, index):
        return f"handle-{index}"

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H100 80GB HBM3" if handle == "handle-0" else "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-1234-{handle[-1]}"

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=81559 * 2**20, free=0, used=0)


def test_nvml_reports_every_device():
    backend = open_backend("nvml", "n1", "g2", nvml=FakeNvml())
    assert backend.real
    assert backend.gpus() == [
        {"index": 0, "uuid": "GPU-1234-0", "model": "NVIDIA H100 80GB HBM3", "memory_gb": 80},
        {"index": 1, "uuid": "GPU-1234-1", "model": "NVIDIA H100 80GB HBM3", "memory_gb": 80},
    ]


def test_nvml_is_found_as_the_pynvml_module(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    backend = open_backend("auto", "n1", "g2")
    assert len(backend.gpus()) == 2
    backend.close()
    assert fake.shutdowns == 1


def test_auto_without_a_driver_tells_the_operator_to_simulate(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail_init=True))
    with pytest.raises(GpuProbeError, match=r"Pass --gpus simulated:N"):
        open_backend("auto", "n1", "g2")


def test_nvml_backend_accepts_an_injected_module():
    assert NvmlBackend(FakeNvml()).gpus()[1]["index"] == 1


def test_simulated_gpus_follow_the_server_type():
    backend = open_backend("simulated:3", "node-a", "g3")
    assert not backend.real
    assert backend.gpus() == [
        {"index": i, "uuid": f"GPU-sim-node-a-{i}", "model": "NVIDIA B300 SXM", "memory_gb": 288} for i in range(3)
    ]
    assert SimulatedBackend("n", 8, "g2").gpus()[7] == {
        "index": 7, "uuid": "GPU-sim-n-7", "model": "NVIDIA H100 SXM", "memory_gb": 80,
    }


def test_simulated_needs_a_known_server_type():
    with pytest.raises(GpuProbeError, match="g2, g3"):
        open_backend("simulated:1", "n", "g9")
