"""Random number generator states: captured with a checkpoint so a resumed run draws the same numbers."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def capture_rng_state(all_cuda_devices: bool = True) -> dict[str, Any]:
    """Python, NumPy, torch CPU and (when present) CUDA generator states."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "cpu": torch.random.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = (torch.cuda.random.get_rng_state_all() if all_cuda_devices
                         else torch.cuda.random.get_rng_state())
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.random.set_rng_state(state["cpu"])
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available():
        if isinstance(cuda, (list, tuple)):
            torch.cuda.random.set_rng_state_all(cuda)
        else:
            torch.cuda.random.set_rng_state(cuda)
