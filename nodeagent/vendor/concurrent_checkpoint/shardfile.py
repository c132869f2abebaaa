"""The shard file format: one file per rank per checkpoint.

    [tensor bytes at 64-byte aligned offsets][pickled structure][JSON footer][u64 footer length][magic]

The footer lists every tensor (dtype, shape, offset), the SHA-256 of every piece of the tensor
region (`pieces`: [[length, sha256 hex], ...] in file order, as the writer threads wrote them)
and the structure's offset and SHA-256. It is written last, so a file cut short has no valid
footer. The manifest records the same piece hashes plus one for structure and footer: the whole
file, which `read_shard(expected_sha256=...)` checks on the very bytes it loads.
Shards of format 1 (earlier versions) carry a CRC32 per tensor range instead and are still read.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import os
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from .errors import CheckpointCorrupted
from .snapshot import TensorSpec, rebuild

MAGIC = b"CCKPT\x00v1"
_TAIL = struct.Struct("<Q8s")
FORMAT_VERSION = 2
READABLE_FORMATS = (1, 2)
_SCRATCH = 1 << 16

__all__ = ["CheckpointCorrupted", "encode_footer", "pwrite_all", "read_footer", "read_shard"]


def encode_footer(specs: list[TensorSpec], skeleton_offset: int, skeleton: bytes,
                  pieces: list[list[Any]]) -> bytes:
    footer = {
        "format": FORMAT_VERSION,
        "tensors": [s.to_json() for s in specs],
        "skeleton": {"offset": skeleton_offset, "nbytes": len(skeleton),
                     "sha256": hashlib.sha256(skeleton).hexdigest()},
        "pieces": pieces,
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
    footer, raw = _read_footer(path)
    return footer, zlib.crc32(raw)


def _read_footer(path: Path) -> tuple[dict[str, Any], bytes]:
    """The decoded footer and its bytes as stored (footer, length and magic)."""
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
        footer = json.loads(body)
    except ValueError as exc:
        raise CheckpointCorrupted(f"{path}: unreadable footer: {exc}") from exc
    if not isinstance(footer, dict):
        raise CheckpointCorrupted(f"{path}: unreadable footer")
    return footer, body + _TAIL.pack(length, MAGIC)


def read_shard(path: Path, *, expected_crc: int | None = None,
               expected_sha256: list[list[Any]] | None = None, verify: bool = True,
               map_location: str | torch.device | None = "cpu") -> Any:
    """Load one shard back into the state that was saved (tensors on `map_location`).

    `expected_sha256`: the manifest's [[length, sha256 hex], ...] over the whole file; the bytes
    are checked as they are read (always, whatever `verify` says). Without it, `verify` checks
    the footer's own piece hashes (format 1: CRC32s), which catch damage, not forgery."""
    footer, footer_bytes = _read_footer(path)
    if expected_crc is not None and zlib.crc32(footer_bytes) != expected_crc:
        raise CheckpointCorrupted(f"{path}: footer checksum {zlib.crc32(footer_bytes)} != manifest {expected_crc}")
    version = footer.get("format")
    if version not in READABLE_FORMATS:
        raise CheckpointCorrupted(f"{path}: unknown shard format {version!r}")
    try:
        specs = [TensorSpec.from_json(t) for t in footer["tensors"]]
        meta = footer["skeleton"]
        skeleton_offset, skeleton_bytes = int(meta["offset"]), int(meta["nbytes"])
        ranges = expected_sha256
        if ranges is None and verify and version >= 2:
            ranges = [*footer["pieces"], [skeleton_bytes, meta["sha256"]]]
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointCorrupted(f"{path}: unreadable footer: {exc}") from exc
    if ranges is not None:
        buffers, skeleton = _read_hashed(path, specs, skeleton_offset, skeleton_bytes, ranges, footer_bytes)
    else:
        buffers = []
        with open(path, "rb", buffering=0) as handle:
            for spec in specs:
                buffers.append(_read_tensor(handle, spec, verify and version == 1, path))
            handle.seek(skeleton_offset)
            skeleton = handle.read(skeleton_bytes)
        if verify and version == 1 and zlib.crc32(skeleton) != meta.get("crc"):
            raise CheckpointCorrupted(f"{path}: structure checksum mismatch")
    state = rebuild(skeleton, specs, buffers)
    if map_location is not None and str(map_location) != "cpu":
        state = _move(state, torch.device(map_location))
    return state


def _read_hashed(path: Path, specs: list[TensorSpec], skeleton_offset: int, skeleton_bytes: int,
                 ranges: list[list[Any]], footer_bytes: bytes) -> tuple[list[torch.Tensor], bytes]:
    """Every byte is read straight into the tensor (or structure) it belongs to and fed to the
    SHA-256 of its range, so what is loaded is exactly what was hashed; a range that does not
    match stops the load. Ranges (the pieces the writer threads hashed) are read and hashed in
    parallel: hashlib and pread release the GIL, and one core hashes only ~1 GB/s."""
    checked = _parse_ranges(ranges, path)
    covered = sum(length for length, _ in checked)
    size = path.stat().st_size
    if covered not in (size, skeleton_offset + skeleton_bytes):
        raise CheckpointCorrupted(f"{path}: the hashes cover {covered} bytes; the file has {size}")
    buffers = [torch.empty(spec.nbytes, dtype=torch.uint8) for spec in specs]
    tail = bytearray(max(covered - skeleton_offset, 0))
    sinks = sorted(((spec.offset, spec.nbytes, memoryview(buf.numpy()))
                    for spec, buf in zip(specs, buffers, strict=True) if spec.nbytes), key=lambda s: s[0])
    sinks.append((skeleton_offset, len(tail), memoryview(tail)))
    previous_end = 0
    for start, length, _ in sinks:
        if start < previous_end or start + length > covered:
            raise CheckpointCorrupted(f"{path}: the footer's layout overlaps or runs past the file")
        previous_end = start + length
    starts = [start for start, _, _ in sinks]
    bounds = list(itertools.accumulate((length for length, _ in checked), initial=0))
    fd = os.open(path, os.O_RDONLY)
    try:
        def read_range(index: int) -> bool:
            return _read_range(fd, sinks, starts, bounds[index], bounds[index + 1], checked[index][1], path)

        workers = min(len(checked), os.cpu_count() or 1, 8)
        if workers > 1:
            with ThreadPoolExecutor(workers, thread_name_prefix="ckpt-verify") as pool:
                verdicts = list(pool.map(read_range, range(len(checked))))
        else:
            verdicts = [read_range(index) for index in range(len(checked))]
    finally:
        os.close(fd)
    for index, ok in enumerate(verdicts):
        if not ok:
            raise CheckpointCorrupted(f"{path}: bytes {bounds[index]}..{bounds[index + 1]} do not match "
                                      "their SHA-256")
    if covered == size and bytes(tail[skeleton_bytes:]) != footer_bytes:
        raise CheckpointCorrupted(f"{path}: the footer that was parsed is not the one that was hashed")
    return buffers, bytes(tail[:skeleton_bytes])


def _read_range(fd: int, sinks: list[tuple[int, int, memoryview]], starts: list[int], position: int,
                stop: int, digest: str, path: Path) -> bool:
    """Read [position, stop) into the sinks it overlaps (padding into a scratch buffer); whether
    its SHA-256 is `digest`."""
    hasher = hashlib.sha256()
    scratch = memoryview(bytearray(min(_SCRATCH, max(stop - position, 1))))
    index = max(bisect.bisect_right(starts, position) - 1, 0)
    while position < stop:
        while index < len(sinks) and sinks[index][0] + sinks[index][1] <= position:
            index += 1
        if index < len(sinks) and sinks[index][0] <= position:
            start, length, view = sinks[index]
            part = view[position - start:min(stop, start + length) - start]
        else:  # alignment padding between tensors
            following = sinks[index][0] if index < len(sinks) else stop
            part = scratch[:min(stop, following, position + len(scratch)) - position]
        _pread_exactly(fd, part, position, path)
        hasher.update(part)
        position += len(part)
    return hasher.hexdigest() == digest


def _parse_ranges(ranges: list[list[Any]], path: Path) -> list[tuple[int, str]]:
    try:
        parsed = [(int(length), str(digest)) for length, digest in ranges]
    except (TypeError, ValueError) as exc:
        raise CheckpointCorrupted(f"{path}: unreadable hash list: {exc}") from exc
    if any(length < 0 for length, _ in parsed):
        raise CheckpointCorrupted(f"{path}: unreadable hash list")
    return parsed


def _pread_exactly(fd: int, view: memoryview, offset: int, path: Path) -> None:
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if not got:
            raise CheckpointCorrupted(f"{path}: cut short")
        done += got


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
