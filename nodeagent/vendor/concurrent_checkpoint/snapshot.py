"""Turning a state (nested dicts/lists of tensors and plain objects) into a shard plan.

The non-tensor structure is pickled at `save()` time, with every dense tensor replaced by a
reference, so later changes to Python objects cannot leak into the checkpoint. The tensors'
bytes are then laid out in file order and cut into pieces that are copied into the host cache
and written independently.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .errors import CheckpointCorrupted
from .host_cache import PAGE, align_up
from .safe_pickle import TENSOR_ID, TORCH_ID, dump_torch, loads

TENSOR_ALIGN = 64  # tensors inside a piece start on a cache line

_FAST_TYPES = (torch.Tensor, nn.Parameter)
_DEVICES = ("cpu", "cuda")


@dataclass
class TensorSpec:
    dtype: str
    shape: list[int]
    offset: int  # in the shard file
    nbytes: int
    device: str
    parameter: bool
    requires_grad: bool
    # [[length, crc32], ...] in byte order: shards of format 1 only; format 2 hashes whole pieces
    crcs: list[list[int]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "dtype": self.dtype, "shape": self.shape, "offset": self.offset,
            "nbytes": self.nbytes, "device": self.device, "parameter": self.parameter,
            "requires_grad": self.requires_grad,
        }
        if self.crcs:
            data["crcs"] = self.crcs
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TensorSpec:
        return cls(**data)


@dataclass
class Segment:
    tensor: int  # index into the snapshot's tensors
    lo: int  # byte range of that tensor
    hi: int
    rel: int  # where the range sits inside its piece


@dataclass
class Piece:
    offset: int  # in the shard file
    length: int
    segments: list[Segment]


@dataclass
class Snapshot:
    skeleton: bytes
    originals: list[torch.Tensor]  # the live tensors (their version counters tell of changes)
    tensors: list[torch.Tensor]  # the same, flattened to bytes
    specs: list[TensorSpec]
    data_end: int
    pieces: list[Piece] = field(default_factory=list)

    def release_sources(self) -> None:
        """Drop the references to the live tensors once their bytes are in the host cache."""
        self.originals = []
        self.tensors = []

    @property
    def raw_bytes(self) -> int:
        return sum(s.nbytes for s in self.specs) + len(self.skeleton)


class _Collector:
    """Gives each distinct dense tensor an index; identical views (tied weights) share one."""

    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []
        self.originals: list[torch.Tensor] = []
        self._seen: dict[tuple, int] = {}

    def accepts(self, tensor: torch.Tensor) -> bool:
        return (type(tensor) in _FAST_TYPES and tensor.layout == torch.strided
                and tensor.device.type in _DEVICES and not tensor.is_quantized
                and not tensor.is_nested)

    def add(self, tensor: torch.Tensor) -> int:
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
               tensor.stride(), tensor.dtype, tensor.device, type(tensor))
        index = self._seen.get(key)
        if index is None:
            index = len(self.tensors)
            self._seen[key] = index
            self.originals.append(tensor)
            self.tensors.append(_flat_bytes(tensor))
        return index


class _SkeletonPickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, collector: _Collector) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._collector = collector

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            if self._collector.accepts(obj):
                return (TENSOR_ID, self._collector.add(obj))
            # sparse, quantized, meta, subclasses: torch's own format, so that loading them needs
            # torch.load(weights_only=True), never a pickled reduce of torch internals
            return (TORCH_ID, dump_torch(obj))
        return None  # everything else is pickled by value, right now


def _flat_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A 1-D uint8 view of the tensor's data (a contiguous copy first if it is strided oddly)."""
    t = tensor.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.reshape(-1).view(torch.uint8)


def capture(state: Any) -> Snapshot:
    """Pickle the structure now; `plan_pieces` decides where each tensor's bytes go."""
    collector = _Collector()
    buffer = io.BytesIO()
    with torch.no_grad():
        _SkeletonPickler(buffer, collector).dump(state)
    specs = [TensorSpec(dtype=str(original.dtype).removeprefix("torch."), shape=list(original.shape),
                        offset=-1, nbytes=flat.numel(), device=str(original.device),
                        parameter=isinstance(original, nn.Parameter), requires_grad=original.requires_grad)
             for original, flat in zip(collector.originals, collector.tensors, strict=True)]
    return Snapshot(buffer.getvalue(), collector.originals, collector.tensors, specs, data_end=0)


def estimate_bytes(specs: list[TensorSpec], piece_max: int) -> int:
    """An upper bound of the data region `plan_pieces` will lay out."""
    total = sum(align_up(s.nbytes, TENSOR_ALIGN) for s in specs)
    return total + PAGE * (total // max(piece_max, 1) + len(specs) // 64 + 2)


def plan_pieces(snapshot: Snapshot, piece_max: int) -> None:
    """Give every tensor its file offset and cut the data region into pieces of at most `piece_max`.

    Small tensors are packed together, one that fits in a piece is never split, larger ones are
    cut. Pieces start on a page and their length is a whole number of pages, so a piece can be
    written with O_DIRECT straight from the host cache.
    """
    piece_max = max(PAGE, piece_max // PAGE * PAGE)
    pieces: list[Piece] = []
    current: Piece | None = None
    cursor = 0
    for index, spec in enumerate(snapshot.specs):
        spec.offset = align_up(cursor, TENSOR_ALIGN)
        if current is not None and spec.nbytes <= piece_max < spec.offset + spec.nbytes - current.offset:
            current = None  # does not fit in what is left; it fits in a piece of its own
        lo = 0
        while lo < spec.nbytes:
            if current is None or spec.offset + lo >= current.offset + piece_max:
                if lo == 0:
                    spec.offset = align_up(cursor, PAGE)
                current = Piece(offset=spec.offset + lo, length=0, segments=[])
                pieces.append(current)
            start = spec.offset + lo
            hi = lo + min(spec.nbytes - lo, current.offset + piece_max - start)
            current.segments.append(Segment(index, lo, hi, start - current.offset))
            current.length = start - current.offset + (hi - lo)
            lo = hi
        cursor = spec.offset + spec.nbytes
    for piece in pieces:
        piece.length = align_up(piece.length, PAGE)
    snapshot.pieces = pieces
    snapshot.data_end = align_up(cursor, PAGE)


def rebuild(skeleton: bytes, specs: list[TensorSpec], buffers: list[torch.Tensor]) -> Any:
    """Inverse of `capture`: turn byte buffers back into typed tensors and unpickle the state."""
    tensors = [_typed(spec, buf) for spec, buf in zip(specs, buffers, strict=True)]
    return loads(skeleton, tensors)


def _typed(spec: TensorSpec, raw: torch.Tensor) -> torch.Tensor:
    dtype = getattr(torch, str(spec.dtype), None)
    if not isinstance(dtype, torch.dtype):
        raise CheckpointCorrupted(f"unknown tensor dtype {spec.dtype!r}")
    tensor = raw.view(dtype).reshape(spec.shape) if spec.nbytes else torch.empty(spec.shape, dtype=dtype)
    if spec.parameter:
        return nn.Parameter(tensor, requires_grad=spec.requires_grad)
    if spec.requires_grad and tensor.is_floating_point():
        tensor.requires_grad_(True)
    return tensor
