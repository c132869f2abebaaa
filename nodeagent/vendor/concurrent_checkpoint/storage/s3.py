"""Mirroring complete checkpoints to S3-compatible object storage, and fetching them back.

Keys: `<prefix>/step-<N>/<file>`. A checkpoint's MANIFEST.json is uploaded last and deleted first,
so in the bucket too a checkpoint is visible only when all of its files are there. With the job's
signing key, a step counts only when its MANIFEST.json verifies (one GET per new manifest), and
every fetched file must match the SHA-256 the manifest records.
"""

from __future__ import annotations

import os
import threading
import zlib
from pathlib import Path

from ..config import ConfigError, S3Config
from ..errors import CheckpointCorrupted
from ..layout import MANIFEST, parse_step, step_name
from ..manifest import FileEntry, Manifest
from ..trust import Trust

_MiB = 1 << 20


class S3Mirror:
    def __init__(self, config: S3Config, trust: Trust | None = None) -> None:
        try:
            import boto3
            from boto3.s3.transfer import TransferConfig
            from botocore.config import Config
        except ImportError as exc:
            raise ConfigError("mirroring checkpoints to S3 needs boto3 in the training image") from exc
        self.config = config
        self.trust = trust or Trust(None)
        self._verdicts: dict[int, tuple[str, bool]] = {}  # step -> (manifest ETag, trusted)
        self._lock = threading.Lock()
        self.client = boto3.client(
            "s3", endpoint_url=config.endpoint_url, aws_access_key_id=config.access_key,
            aws_secret_access_key=config.secret_key, region_name=config.region,
            config=Config(retries={"max_attempts": 8, "mode": "standard"}),
        )
        # multipart above 64 MiB, a few parts in flight: large shards upload in parallel parts
        self.transfer = TransferConfig(multipart_threshold=64 * _MiB, multipart_chunksize=64 * _MiB,
                                       max_concurrency=4, use_threads=True)

    def check(self) -> None:
        """Fail at start-up, not at the first checkpoint, when the bucket cannot be reached."""
        try:
            self.client.head_bucket(Bucket=self.config.bucket)
        except Exception as exc:
            raise ConfigError(f"checkpoint mirror {self.config.url} is not reachable: {exc}") from exc

    def upload(self, local_dir: Path, manifest: Manifest) -> None:
        step = step_name(manifest.step)
        for entry in manifest.files:
            self.client.upload_file(str(local_dir / entry.name), self.config.bucket,
                                    self.config.key(step, entry.name), Config=self.transfer)
        self.client.put_object(Bucket=self.config.bucket, Key=self.config.key(step, MANIFEST),
                               Body=manifest.stored or manifest.to_json(self.trust.key))

    def complete_steps(self) -> list[int]:
        """Steps whose MANIFEST.json is in the bucket (and, with a key, verifies), oldest first."""
        listed: dict[int, str] = {}
        for key, etag in self._objects(f"{self.config.prefix}/" if self.config.prefix else ""):
            parts = key.rsplit("/", 2)
            step = parse_step(parts[-2]) if len(parts) >= 2 and parts[-1] == MANIFEST else None
            if step is not None and key == self.config.key(step_name(step), MANIFEST):
                listed[step] = etag
        if self.trust.key is None:
            return sorted(listed)
        with self._lock:  # forget the verdicts on steps that are gone
            self._verdicts = {s: v for s, v in self._verdicts.items() if s in listed}
        return sorted(step for step, etag in listed.items() if self._trusted(step, etag))

    def _trusted(self, step: int, etag: str) -> bool:
        """Verify a listed manifest once per version (its ETag); later listings reuse the verdict."""
        with self._lock:
            known = self._verdicts.get(step)
        if known is not None and known[0] == etag and etag:
            return known[1]
        try:
            self.manifest(step)
            trusted = True
        except CheckpointCorrupted as exc:  # unsigned, another job's key, altered, unreadable
            self.trust.skip(step, self.config.url, exc)
            trusted = False
        with self._lock:
            self._verdicts[step] = (etag, trusted)
        return trusted

    def manifest(self, step: int) -> Manifest:
        body = self.client.get_object(Bucket=self.config.bucket,
                                      Key=self.config.key(step_name(step), MANIFEST))["Body"].read()
        return self.trust.manifest(body, f"{self.config.url}/{step_name(step)}/{MANIFEST}", step)

    def fetch(self, step: int, dest: Path, names: list[str]) -> Manifest:
        """Download the named files of a complete checkpoint into `dest` (MANIFEST.json last)."""
        manifest = self.manifest(step)
        dest.mkdir(parents=True, exist_ok=True)
        for name in names:
            entry = manifest.file(name)
            if entry is None:
                raise CheckpointCorrupted(f"{self.config.url}/{step_name(step)} has no {name}")
            target = dest / name
            if target.is_file() and target.stat().st_size == entry.bytes and entry.kind == "shard":
                continue  # fetched before; shards are checked in full when read
            tmp = dest / f".{name}.tmp-{os.getpid()}"
            self.client.download_file(self.config.bucket, self.config.key(step_name(step), name),
                                      str(tmp), Config=self.transfer)
            if tmp.stat().st_size != entry.bytes:
                raise CheckpointCorrupted(f"{name} from {self.config.url}: size {tmp.stat().st_size}"
                                          f" != {entry.bytes}")
            if entry.kind != "shard" and not _matches(entry, tmp.read_bytes()):
                tmp.unlink(missing_ok=True)
                raise CheckpointCorrupted(f"{name} from {self.config.url}: content does not match the manifest")
            os.replace(tmp, target)  # shards: their hashes are checked as they are read
        (dest / MANIFEST).write_bytes(manifest.stored)  # as received: its signature verifies there
        return manifest

    def delete(self, step: int) -> None:
        prefix = self.config.key(step_name(step)) + "/"
        # un-commit first: a reader must never see a manifest whose files are going away
        self.client.delete_object(Bucket=self.config.bucket, Key=prefix + MANIFEST)
        keys = self._keys(prefix)
        for start in range(0, len(keys), 1000):
            self.client.delete_objects(Bucket=self.config.bucket, Delete={
                "Objects": [{"Key": k} for k in keys[start:start + 1000]], "Quiet": True})

    def _keys(self, prefix: str) -> list[str]:
        return [key for key, _ in self._objects(prefix)]

    def _objects(self, prefix: str) -> list[tuple[str, str]]:
        objects: list[tuple[str, str]] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.config.bucket, Prefix=prefix):
            objects.extend((obj["Key"], obj.get("ETag", "")) for obj in page.get("Contents", []) or [])
        return objects


def _matches(entry: FileEntry, data: bytes) -> bool:
    if entry.sha256:
        return entry.matches(data)
    return len(data) == entry.bytes and zlib.crc32(data) == entry.crc32  # a format-1 manifest

