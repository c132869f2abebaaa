"""Concurrent checkpointing: asynchronous, crash-safe checkpoints for PyTorch training.

Self-contained: needs only `torch` (and `numpy`, which torch brings). `transformers`, `boto3` and
DeepSpeed are used when present. Put the vendor directory on PYTHONPATH to import it.
"""

from __future__ import annotations

from typing import Any

from .committer import CheckpointError, PendingCheckpoint, TornSnapshot
from .config import CheckpointConfig, ConfigError, S3Config
from .engine import CheckpointEngine, EngineStats
from .errors import CheckpointCorrupted, UntrustedCheckpoint
from .loading import Checkpoint, CheckpointRef
from .rng import capture_rng_state, restore_rng_state
from .safe_pickle import ForbiddenGlobal, allow_globals
from .shardfile import read_shard

__all__ = [
    "Checkpoint", "CheckpointConfig", "CheckpointCorrupted", "CheckpointEngine", "CheckpointError",
    "CheckpointRef", "ConfigError", "EngineStats", "ForbiddenGlobal", "PendingCheckpoint", "S3Config",
    "TornSnapshot", "TrainerCheckpointing", "UntrustedCheckpoint", "allow_globals", "capture_rng_state",
    "read_shard", "restore_rng_state", "wrap_deepspeed_engine",
]


def __getattr__(name: str) -> Any:
    # the integrations import transformers / deepspeed helpers only when asked for
    if name == "TrainerCheckpointing":
        from .hf_trainer import TrainerCheckpointing
        return TrainerCheckpointing
    if name == "wrap_deepspeed_engine":
        from .deepspeed_integration import wrap_deepspeed_engine
        return wrap_deepspeed_engine
    raise AttributeError(name)
