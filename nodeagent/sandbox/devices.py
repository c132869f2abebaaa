"""Which GPUs a placement may open: its allocated /dev/nvidia<N> and the driver's shared nodes.

`/dev/nvidia*` are mode 0666 on a GPU node: any local user can open any GPU, and
CUDA_VISIBLE_DEVICES is no boundary. The devices controller is (cgroup v1): a placement's group
starts from its parent's rules (everything allowed) and denies every GPU minor of the NVIDIA
character major that is not its own. nvidiactl (minor 255), nvidia-modeset (254), nvidia-uvm and
nvidia-uvm-tools (a major of their own) stay allowed: every CUDA process needs them. Minors are
denied over the driver's whole range, not only the GPUs present, so a node created later (by
nvidia-modprobe) is covered as well. cgroup v2 needs an eBPF program for this, which the agent
does not load (the job's log says so).

An NVML index (the console's gpu_indices) names the GPU's place in PCI bus order; its minor
number is the driver's and may differ: /proc/driver/nvidia/gpus/<bus id>/information says it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

NVIDIA_MAJOR = 195
GPU_MINORS = range(0, 254)  # 254: nvidia-modeset, 255: nvidiactl
_MINOR = re.compile(r"^Device Minor:\s*(\d+)\s*$", re.MULTILINE)


def gpu_minors(indices: Iterable[int], driver: Path = Path("/proc/driver/nvidia/gpus")) -> list[int]:
    """The /dev/nvidia<N> minor of each NVML index (PCI bus order); the index itself where the
    driver does not say (no driver, or fewer GPUs than the index)."""
    by_bus: list[int] = []
    try:
        buses = sorted(entry for entry in driver.iterdir() if entry.is_dir())
    except OSError:
        buses = []
    for bus in buses:
        try:
            match = _MINOR.search((bus / "information").read_text())
        except OSError:
            match = None
        if match is None:
            by_bus = []
            break  # an order this module does not understand: fall back to the index
        by_bus.append(int(match.group(1)))
    return [by_bus[index] if index < len(by_bus) else index for index in indices]


def deny_rules(allowed_minors: Iterable[int]) -> list[str]:
    """devices.deny lines: every GPU minor of the NVIDIA major except the allowed ones."""
    allowed = set(allowed_minors)
    return [f"c {NVIDIA_MAJOR}:{minor} rwm" for minor in GPU_MINORS if minor not in allowed]
