"""Who we are in a multi-process job: global rank and world size."""

from __future__ import annotations

from typing import Any

from .config import ConfigError, env_int


def _dist() -> Any | None:
    try:
        import torch.distributed as dist
    except ImportError:  # builds without distributed support
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def resolve_rank(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """Explicit values first, then the process group, then RANK / WORLD_SIZE, else (0, 1)."""
    dist = _dist()
    if rank is None:
        rank = dist.get_rank() if dist else env_int("RANK", minimum=0)
    if world_size is None:
        world_size = dist.get_world_size() if dist else env_int("WORLD_SIZE", minimum=1)
    rank = 0 if rank is None else rank
    world_size = 1 if world_size is None else world_size
    if not 0 <= rank < world_size:
        raise ConfigError(f"rank {rank} is outside world size {world_size}")
    return rank, world_size


def broadcast_from_rank0(value: Any) -> Any:
    """Rank 0's value on every rank (when a process group exists; otherwise the value itself)."""
    dist = _dist()
    if dist is None or dist.get_world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]

