"""Manifests: what each rank wrote (rank-R.json) and what the checkpoint holds (MANIFEST.json)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .shardfile import CheckpointCorrupted

MANIFEST_FORMAT = 1


@dataclass
class FileEntry:
    name: str
    rank: int
    bytes: int
    crc32: int
    raw_bytes: int = 0  # shards only: tensor bytes + structure, before alignment
    kind: str = "file"  # "shard" or "file"


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

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, origin: str = "manifest") -> Manifest:
        try:
            raw = json.loads(data)
            if raw.get("format") != MANIFEST_FORMAT:
                raise CheckpointCorrupted(f"{origin}: unknown manifest format {raw.get('format')!r}")
            raw["files"] = [FileEntry(**f) for f in raw["files"]]
            return cls(**raw)
        except (ValueError, TypeError, KeyError) as exc:
            raise CheckpointCorrupted(f"{origin}: unreadable manifest: {exc}") from exc

    @classmethod
    def read(cls, path: Path) -> Manifest:
        return cls.from_json(path.read_bytes(), str(path))

    def shard(self, rank: int) -> FileEntry | None:
        return next((f for f in self.files if f.kind == "shard" and f.rank == rank), None)

    def file(self, name: str) -> FileEntry | None:
        return next((f for f in self.files if f.name == name), None)

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes for f in self.files)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
