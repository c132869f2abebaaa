"""Restoring a state's structure without running code from the checkpoint's bytes.

Unpickling calls whatever globals the pickle names, so a checkpoint someone else wrote could
run any function (`os.system`, ...) in the job that restores it. The structure is therefore
unpickled with an explicit allow-list: the types the library itself writes for plain PyTorch
state dicts, optimizer and scheduler states, RNG states (torch, NumPy, Python `random`), the
Hugging Face Trainer and DeepSpeed. Any other global is refused with `ForbiddenGlobal`, naming
it. A job that checkpoints objects of its own classes allows them explicitly:

    from concurrent_checkpoint import allow_globals
    allow_globals(MyConfig, "mypackage.schedules:WarmupSchedule")

Tensors never travel as pickles: dense ones are raw bytes in the shard; others (sparse,
quantized, meta, tensor subclasses) are `torch.save`d and read back with
`torch.load(weights_only=True)`, where the same user-allowed classes are passed to torch.
"""

from __future__ import annotations

import io
import pickle
import threading
from typing import Any

import torch

from .errors import CheckpointCorrupted

TENSOR_ID = "cc-tensor"  # persistent id of a dense tensor: its index in the shard's tensor table
TORCH_ID = "cc-torch"  # persistent id of any other tensor: its torch.save bytes

_TORCH_CONSTANTS = {name for name, value in vars(torch).items()
                    if isinstance(value, (torch.dtype, torch.memory_format))}

# module -> names; everything a state saved by this library (or DeepSpeed through it) refers to
_ALLOWED: dict[str, set[str]] = {
    "builtins": {"complex", "slice", "range", "set", "frozenset", "list", "dict", "tuple", "int",
                 "float", "bool", "str", "bytes", "bytearray"},
    "collections": {"OrderedDict", "defaultdict", "deque"},
    # NumPy arrays and scalars (RNG state, metrics); `numpy.core` before NumPy 2, `numpy._core` since
    "numpy": {"dtype", "ndarray"},
    "numpy.core.multiarray": {"_reconstruct", "scalar"},
    "numpy._core.multiarray": {"_reconstruct", "scalar"},
    "numpy.core.numeric": {"_frombuffer"},
    "numpy._core.numeric": {"_frombuffer"},
    "torch": {"Size", "device"} | _TORCH_CONSTANTS,
    "torch.serialization": {"_get_layout"},  # looks up a torch.layout by name, nothing else
    "torch._utils": {f"torch.{name}" for name in _TORCH_CONSTANTS},  # how memory formats pickle
    # DeepSpeed's ZeRO / BF16 optimizer states
    "deepspeed.runtime.fp16.loss_scaler": {"LossScaler", "DynamicLossScaler"},
    "deepspeed.runtime.zero.config": {"ZeroStageEnum"},
    "deepspeed.utils.tensor_fragment": {"fragment_address"},
}
_user_allowed: set[tuple[str, str]] = set()
_user_objects: list[Any] = []
_lock = threading.Lock()


class ForbiddenGlobal(CheckpointCorrupted, pickle.UnpicklingError):
    """The checkpoint's structure names a global that is not on the allow-list (see module doc)."""

    def __init__(self, module: str, name: str) -> None:
        self.global_name = f"{module}.{name}"
        super().__init__(
            f"refusing to load global {self.global_name!r}: not on the allow-list of what a checkpoint "
            "may contain (PyTorch, NumPy, Python and DeepSpeed state). If this is a class of your own "
            "that you saved, call concurrent_checkpoint.allow_globals(...) with it before loading.")


def allow_globals(*items: Any) -> None:
    """Let checkpoints refer to these classes or functions (objects, or "module:qualname" /
    "module.name" strings; lists of them too). Process-wide; allow only what you would import
    and call yourself."""
    flat: list[Any] = []
    for item in items:
        flat.extend(item if isinstance(item, (list, tuple, set)) else [item])
    names: list[tuple[str, str]] = []
    objects: list[Any] = []
    for item in flat:
        if isinstance(item, str):
            module, sep, name = item.partition(":")
            if not sep:
                module, _, name = item.rpartition(".")
            if not module or not name:
                raise ValueError(f"{item!r} is not 'module.name' or 'module:qualname'")
        else:
            module, name = getattr(item, "__module__", None), getattr(item, "__qualname__", None)
            if not module or not name:
                raise TypeError(f"{item!r} has no __module__/__qualname__; pass a class or function")
            objects.append(item)
        names.append((module, name))
    with _lock:
        _user_allowed.update(names)
        _user_objects.extend(objects)


def is_allowed(module: str, name: str) -> bool:
    return name in _ALLOWED.get(module, ()) or (module, name) in _user_allowed


class SafeUnpickler(pickle.Unpickler):
    """The allow-listed unpickler for a shard's structure; `tensors` resolve the dense tensor ids."""

    def __init__(self, file: io.BytesIO, tensors: list[Any], placeholders: bool = False) -> None:
        super().__init__(file)
        self._tensors = tensors
        self._placeholders = placeholders  # None for every tensor (only the globals are of interest)

    def find_class(self, module: str, name: str) -> Any:
        # checked before anything is imported: a refused module is never even loaded
        if not is_allowed(module, name):
            raise ForbiddenGlobal(module, name)
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        if not isinstance(pid, tuple) or len(pid) != 2:
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        kind, value = pid
        if self._placeholders and kind in (TENSOR_ID, TORCH_ID):
            return None
        if kind == TENSOR_ID and isinstance(value, int) and 0 <= value < len(self._tensors):
            return self._tensors[value]
        if kind == TORCH_ID and isinstance(value, bytes):
            return load_torch_bytes(value)
        raise pickle.UnpicklingError(f"unknown persistent id {kind!r}")


def loads(data: bytes, tensors: list[Any]) -> Any:
    return SafeUnpickler(io.BytesIO(data), tensors).load()


def forbidden_global(data: bytes) -> str | None:
    """The first global in `data` that loading would refuse, or None (tensors are not needed).

    The committer asks this after each save, so that a job learns about a class it must allow
    when it saves it, not when it resumes."""
    try:
        SafeUnpickler(io.BytesIO(data), [], placeholders=True).load()
    except ForbiddenGlobal as exc:
        return exc.global_name
    except Exception:  # an allowed constructor unhappy with a None for a tensor: not our question
        return None
    return None


def dump_torch(tensor: torch.Tensor) -> bytes:
    buffer = io.BytesIO()
    torch.save(tensor, buffer)
    return buffer.getvalue()


def load_torch_bytes(data: bytes) -> Any:
    """A tensor that was `torch.save`d into the structure, read with `weights_only=True`."""
    with _lock:
        extra = list(_user_objects)
    try:
        if extra:
            with torch.serialization.safe_globals(extra):
                return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointCorrupted(f"a tensor in the structure cannot be loaded safely ({exc}); if "
                                  "its type is yours, call concurrent_checkpoint.allow_globals(...) "
                                  "with it") from exc

