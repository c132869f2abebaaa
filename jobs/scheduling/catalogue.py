"""Resource allocations a server type offers: plain functions over plain data."""

from __future__ import annotations

from dataclasses import dataclass

# A node is sliced in powers of two; memory and vCPUs follow the GPU share.
GPU_SLICES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Allocation:
    name: str  # e.g. at.g3v16b1: type g3, 16 vCPUs, 1 B300
    gpus: int
    vcpus: int
    memory_gb: int


def allocations(type_name: str, gpu_letter: str, gpus_per_node: int, vcpus: int, memory_gb: int) -> list[Allocation]:
    """Every allocation of a server type, smallest first."""
    result = []
    for gpus in GPU_SLICES:
        if gpus > gpus_per_node:
            break
        share_vcpus = vcpus * gpus // gpus_per_node
        result.append(Allocation(
            name=f"at.{type_name}v{share_vcpus}{gpu_letter}{gpus}",
            gpus=gpus,
            vcpus=share_vcpus,
            memory_gb=memory_gb * gpus // gpus_per_node,
        ))
    return result
