"""Which checkpoints this process accepts: with a signing key, only those its own job signed.

The platform gives every attempt of a job the job's key (`CHECKPOINT_SIGNING_KEY`). A step
whose MANIFEST.json is unsigned, signed with another key, or names another step is skipped,
with one warning line per step, so a resume falls back to the newest step the job itself wrote
(or starts fresh). Without a key (a run outside the platform) every complete step counts, as
before; file hashes are checked on load either way.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from .errors import CheckpointCorrupted
from .layout import MANIFEST, complete_steps, step_name
from .manifest import Manifest

log = logging.getLogger("concurrent_checkpoint")


class Trust:
    def __init__(self, key: bytes | None) -> None:
        self.key = key
        self._warned: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def manifest(self, data: bytes, origin: str, step: int | None = None) -> Manifest:
        """The parsed manifest if it may be used; UntrustedCheckpoint or CheckpointCorrupted if not."""
        return Manifest.from_json(data, origin, key=self.key, step=step)

    def read(self, path: Path, step: int | None = None) -> Manifest:
        return self.manifest(path.read_bytes(), str(path), step)

    def local_steps(self, root: Path) -> list[int]:
        """The complete steps under `root` (oldest first) whose manifest verifies."""
        steps = complete_steps(root)
        if self.key is None:
            return steps  # nothing to verify against; loading still checks every file's hash
        trusted = []
        for step in steps:
            try:
                self.read(root / step_name(step) / MANIFEST, step)
            except (OSError, CheckpointCorrupted) as exc:
                self.skip(step, str(root), exc)
                continue
            trusted.append(step)
        return trusted

    def skip(self, step: int, where: str, reason: BaseException | str) -> None:
        """Say once per step and place why it is not used."""
        with self._lock:
            if (where, step) in self._warned:
                return
            self._warned.add((where, step))
        log.warning("[Concurrent Checkpoint] skipping step %d in %s, not trusted: %s", step, where, reason)
