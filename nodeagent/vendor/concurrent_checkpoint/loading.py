"""Reading checkpoints back: which steps are complete (on local disk and in the S3 mirror), the
newest usable one, one rank's state from it. The engine (engine.py) inherits this; it holds the
attributes declared below.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .config import CheckpointConfig
from .errors import CheckpointCorrupted
from .layout import MANIFEST, REMOTE, parse_step, step_name
from .manifest import Manifest
from .shardfile import read_shard
from .storage.s3 import S3Mirror
from .trust import Trust

log = logging.getLogger("concurrent_checkpoint")


@dataclass
class CheckpointRef:
    """A complete checkpoint: its step, directory (local, or fetched from S3) and manifest."""

    step: int
    path: Path
    manifest: Manifest
    source: str = "local"


@dataclass
class Checkpoint(CheckpointRef):
    state: Any = None


LOADED_MARKER = "[Concurrent Checkpoint] loaded step"


class CheckpointLoading:
    """The engine's reading half (locate, read, load); the engine sets these attributes."""

    config: CheckpointConfig
    root: Path
    rank: int
    world_size: int
    _trust: Trust
    _mirror: S3Mirror | None

    def _drain(self) -> None:
        raise NotImplementedError  # the engine's: wait for its checkpoints in flight

    def complete_steps(self) -> list[int]:
        """Steps of complete checkpoints on local disk and (when mirrored) in S3, oldest first
        (with a signing key: only those whose manifest verifies)."""
        return sorted(set(self._trust.local_steps(self.root)) | set(self._remote_steps()))

    def ref_from_dir(self, path: str | Path) -> CheckpointRef:
        """The checkpoint in a `step-N` directory (one that `locate` returned earlier, say).

        With a signing key, UntrustedCheckpoint unless its manifest verifies."""
        path = Path(path)
        manifest = self._trust.read(path / MANIFEST, parse_step(path.name))
        source = "s3" if path.parent.name == REMOTE else "local"
        ref = CheckpointRef(manifest.step, path, manifest, source)
        self._check_files(ref)
        return ref

    def locate(self, step: int | None = None) -> CheckpointRef | None:
        """The complete checkpoint of `step` (newest if None), fetched from S3 if not on local disk."""
        self._drain()
        local = self._trust.local_steps(self.root)
        remote = self._remote_steps()
        if step is not None:
            candidates = [step] if step in local or step in remote else []
        else:
            candidates = sorted(set(local) | set(remote), reverse=True)
        for candidate in candidates:
            try:
                if candidate in local:
                    return self.ref_from_dir(self.root / step_name(candidate))
                return self._fetch(candidate)
            except (OSError, CheckpointCorrupted) as exc:
                log.error("[Concurrent Checkpoint] step %d is unusable, trying an older one: %s",
                          candidate, exc)
        return None

    def read(self, ref: CheckpointRef, rank: int | None = None,
             map_location: str | torch.device | None = "cpu") -> Any:
        """The state one rank saved in checkpoint `ref` (default: this rank)."""
        rank = self.rank if rank is None else rank
        entry = ref.manifest.shard(rank)
        if entry is None:
            raise CheckpointCorrupted(f"{ref.path}: no shard for rank {rank} (saved with world size "
                                      f"{ref.manifest.world_size}, now {self.world_size})")
        path = ref.path / entry.name
        if ref.source != "local" and not path.is_file():
            self._fetch(ref.step, ranks=(rank,))
        if path.stat().st_size != entry.bytes:
            raise CheckpointCorrupted(f"{path}: {path.stat().st_size} bytes, manifest says {entry.bytes}")
        hashes = entry.sha256 if entry.sha256 and (self.config.verify or self._trust.key) else None
        return read_shard(path, expected_crc=entry.crc32, expected_sha256=hashes,
                          verify=self.config.verify, map_location=map_location)

    def load(self, step: int | None = None, *, rank: int | None = None,
             map_location: str | torch.device | None = "cpu") -> Checkpoint | None:
        """Read a complete checkpoint (newest if `step` is None; older ones if the newest is damaged)."""
        self._drain()
        began = time.monotonic()
        steps = [step] if step is not None else sorted(set(self.complete_steps()), reverse=True)
        for candidate in steps:
            ref = self.locate(candidate)
            if ref is None:
                continue
            try:
                state = self.read(ref, rank, map_location)
            except (OSError, CheckpointCorrupted) as exc:
                log.error("[Concurrent Checkpoint] step %d is unusable: %s", candidate, exc)
                continue
            # on stdout, so the job's log says it and the console times the resume from it
            # (jobs.recovery.goodput.CHECKPOINT_LOADED_MARKER: keep the wording)
            print(f"{LOADED_MARKER} {ref.step} in {time.monotonic() - began:.3f} s (from {ref.source})", flush=True)
            return Checkpoint(ref.step, ref.path, ref.manifest, ref.source, state)
        return None

    def load_latest(self, **kwargs: Any) -> Checkpoint | None:
        """The newest complete checkpoint, or None when there is none."""
        return self.load(None, **kwargs)

    # --- internals -----------------------------------------------------------------------------

    def _check_files(self, ref: CheckpointRef) -> None:
        """The small files beside the shards (trainer state, tags) must match their hashes too:
        the Trainer reads them from the directory. Shards are checked as they are read."""
        if not (self.config.verify or self._trust.key):
            return
        for entry in ref.manifest.files:
            path = ref.path / entry.name
            if entry.kind == "shard" or not entry.sha256 or not path.is_file():
                continue  # a fetched step holds only the files this rank needs
            if not entry.matches(path.read_bytes()):
                raise CheckpointCorrupted(f"{path}: content does not match the manifest's SHA-256")

    def _remote_steps(self) -> list[int]:
        if self._mirror is None:
            return []
        try:
            return self._mirror.complete_steps()
        except Exception as exc:  # a resume must still work from local disk
            log.error("[Concurrent Checkpoint] cannot list %s: %s", self._mirror.config.url, exc)
            return []

    def _fetch(self, step: int, ranks: tuple[int, ...] = ()) -> CheckpointRef:
        assert self._mirror is not None
        manifest = self._mirror.manifest(step)
        wanted = {self.rank, 0, *ranks}
        names = [f.name for f in manifest.files if f.kind != "shard" or f.rank in wanted]
        dest = self.root / REMOTE / step_name(step)
        log.info("[Concurrent Checkpoint] fetching step %d from %s", step, self._mirror.config.url)
        manifest = self._mirror.fetch(step, dest, names)
        return CheckpointRef(step, dest, manifest, source="s3")
