"""Manifests: what each rank wrote (rank-R.json) and what the checkpoint holds (MANIFEST.json).

Every file entry carries the SHA-256 of the file ([[length, sha256 hex], ...]: shards in the
pieces the writer threads hashed, other files in one range). MANIFEST.json, written last by
rank 0, folds in every rank's entries and, when the job has a signing key, an HMAC over its
canonical bytes (see `signing`); the rank manifests need no signature of their own.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import signing
from .errors import CheckpointCorrupted, UntrustedCheckpoint

MANIFEST_FORMAT = 2  # 2: SHA-256 per file and a signature; 1 (CRC32 only) is still read without a key
READABLE_FORMATS = (1, 2)


@dataclass
class FileEntry:
    name: str
    rank: int
    bytes: int
    crc32: int
    raw_bytes: int = 0  # shards only: tensor bytes + structure, before alignment
    kind: str = "file"  # "shard" or "file"
    sha256: list[list[Any]] = field(default_factory=list)  # [[length, sha256 hex], ...] in file order

    @classmethod
    def of_bytes(cls, name: str, rank: int, data: bytes) -> FileEntry:
        return cls(name=name, rank=rank, bytes=len(data), crc32=zlib.crc32(data),
                   sha256=[[len(data), hashlib.sha256(data).hexdigest()]])

    def matches(self, data: bytes) -> bool:
        """Whether `data` is this (small, one-range) file as the manifest records it."""
        if len(data) != self.bytes:
            return False
        position = 0
        for length, digest in self.sha256:
            if hashlib.sha256(data[position:position + length]).hexdigest() != digest:
                return False
            position += length
        return position == len(data)


@dataclass
class RankManifest:
    step: int
    rank: int
    world_size: int
    time: str
    files: list[FileEntry] = field(default_factory=list)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes) -> RankManifest:
        raw = json.loads(data)
        raw["files"] = [FileEntry(**f) for f in raw["files"]]
        return cls(**raw)


@dataclass
class Manifest:
    step: int
    world_size: int
    time: str
    created: float  # seconds since the epoch, for ordering by this machine's clock
    files: list[FileEntry]
    metadata: dict[str, Any] = field(default_factory=dict)
    format: int = MANIFEST_FORMAT

    def to_json(self, key: bytes | None = None) -> bytes:
        """The file's bytes; signed when the job has a key."""
        body: dict[str, Any] = asdict(self)
        if key is not None:
            body = signing.sign(body, key)
        return json.dumps(body, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, origin: str = "manifest", *, key: bytes | None = None,
                  step: int | None = None) -> Manifest:
        """Parse a manifest, refusing it (UntrustedCheckpoint) unless it verifies with `key`.

        `step`: the step its location names. Without a key any readable manifest is accepted."""
        try:
            raw = signing.check(data, key, step)
        except signing.UntrustedManifest as exc:
            error = UntrustedCheckpoint if key is not None else CheckpointCorrupted
            raise error(f"{origin}: {exc}") from exc
        raw.pop(signing.SIGNATURE, None)
        try:
            if raw.get("format") not in READABLE_FORMATS:
                raise CheckpointCorrupted(f"{origin}: unknown manifest format {raw.get('format')!r}")
            raw["files"] = [FileEntry(**f) for f in raw["files"]]
            manifest = cls(**raw)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise CheckpointCorrupted(f"{origin}: unreadable manifest: {exc}") from exc
        for entry in manifest.files:
            if not _plain_name(entry.name):
                raise CheckpointCorrupted(f"{origin}: file name {entry.name!r} is not a plain file name")
            if key is not None and not entry.sha256:
                raise UntrustedCheckpoint(f"{origin}: {entry.name} has no SHA-256")
        manifest.stored = data
        return manifest

    @classmethod
    def read(cls, path: Path, *, key: bytes | None = None, step: int | None = None) -> Manifest:
        return cls.from_json(path.read_bytes(), str(path), key=key, step=step)

    def shard(self, rank: int) -> FileEntry | None:
        return next((f for f in self.files if f.kind == "shard" and f.rank == rank), None)

    def file(self, name: str) -> FileEntry | None:
        return next((f for f in self.files if f.name == name), None)

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    # the bytes it was parsed from (not a field: never written back into JSON); a fetched
    # manifest is stored as received, so that its signature still verifies where it lands
    stored = b""


def _plain_name(name: Any) -> bool:
    """A file directly inside the step directory: nothing a download could write elsewhere."""
    return (isinstance(name, str) and bool(name) and name not in (".", "..")
            and "/" not in name and "\\" not in name and "\0" not in name)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
