"""The shard file format: one file per rank per checkpoint.

    [tensor bytes at 64-byte aligned offsets][pickled structure][JSON footer][u64 footer length][magic]

The footer lists every tensor (dtype, shape, offset, CRC32 of each written range) and the
structure's offset and CRC32. It is written last, so a file cut short has no valid footer.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import torch

from .snapshot import TensorSpec, rebuild

MAGIC = b"CCKPT\x00v1"
_TAIL = struct.Struct("<Q8s")
FORMAT_VERSION = 1


class CheckpointCorrupted(Exception):
    """A shard or manifest does not match what was written (cut short, bit rot, wrong file)."""


def encode_footer(specs: list[TensorSpec], skeleton_offset: int, skeleton: bytes) -> bytes:
    footer = {
        "format": FORMAT_VERSION,
        "tensors": [s.to_json() for s in specs],
        "skeleton": {"offset": skeleton_offset, "nbytes": len(skeleton),
                     "crc": zlib.crc32(skeleton)},
    }
    body = json.dumps(footer, separators=(",", ":")).encode()
    return body + _TAIL.pack(len(body), MAGIC)


def pwrite_all(fd: int, data: memoryview | bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def read_footer(path: Path) -> tuple[dict[str, Any], int]:
    """The decoded footer and its CRC32 (which the manifest records)."""
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        if size < _TAIL.size:
            raise CheckpointCorrupted(f"{path}: {size} bytes, too short for a shard")
        handle.seek(size - _TAIL.size)
        length, magic = _TAIL.unpack(handle.read(_TAIL.size))
        if magic != MAGIC or length > size - _TAIL.size:
            raise CheckpointCorrupted(f"{path}: no shard footer (file cut short?)")
        handle.seek(size - _TAIL.size - length)
        body = handle.read(length)
    try:
        return json.loads(body), zlib.crc32(body + _TAIL.pack(length, MAGIC))
    except ValueError as exc:
        raise CheckpointCorrupted(f"{path}: unreadable footer: {exc}") from exc


def read_shard(path: Path, *, expected_crc: int | None = None, verify: bool = True,
               map_location: str | torch.device | None = "cpu") -> Any:
    """Load one shard back into the state that was saved (tensors on `map_location`)."""
    footer, crc = read_footer(path)
    if expected_crc is not None and crc != expected_crc:
        raise CheckpointCorrupted(f"{path}: footer checksum {crc} != manifest {expected_crc}")
    if footer.get("format") != FORMAT_VERSION:
        raise CheckpointCorrupted(f"{path}: unknown shard format {footer.get('format')!r}")
    specs = [TensorSpec.from_json(t) for t in footer["tensors"]]
    buffers: list[torch.Tensor] = []
    with open(path, "rb", buffering=0) as handle:
        for spec in specs:
            buffers.append(_read_tensor(handle, spec, verify, path))
        meta = footer["skeleton"]
        handle.seek(meta["offset"])
        skeleton = handle.read(meta["nbytes"])
    if verify and zlib.crc32(skeleton) != meta["crc"]:
        raise CheckpointCorrupted(f"{path}: structure checksum mismatch")
    state = rebuild(skeleton, specs, buffers)
    if map_location is not None and str(map_location) != "cpu":
        state = _move(state, torch.device(map_location))
    return state


def _read_tensor(handle: Any, spec: TensorSpec, verify: bool, path: Path) -> torch.Tensor:
    buffer = torch.empty(spec.nbytes, dtype=torch.uint8)
    view = memoryview(buffer.numpy())
    handle.seek(spec.offset)
    done = 0
    while done < spec.nbytes:
        got = handle.readinto(view[done:])
        if not got:
            raise CheckpointCorrupted(f"{path}: tensor at {spec.offset} cut short")
        done += got
    if verify:
        position = 0
        for length, crc in spec.crcs:
            if zlib.crc32(view[position:position + length]) != crc:
                raise CheckpointCorrupted(f"{path}: checksum mismatch in tensor at {spec.offset}")
            position += length
        if position != spec.nbytes:
            raise CheckpointCorrupted(f"{path}: checksums cover {position} of {spec.nbytes} bytes")
    return buffer


def _move(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return type(obj)((k, _move(v, device)) for k, v in obj.items())
    if isinstance(obj, list):
        return [_move(v, device) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):  # named tuples keep their type
        return tuple(_move(v, device) for v in obj)
    return obj
