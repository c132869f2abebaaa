"""Names on disk: where each part of a checkpoint lives.

    <output_dir>/concurrent_checkpoint/
        step-<N>/                 complete checkpoints only (renamed in whole from .staging)
            MANIFEST.json         step, time, world size, every file with size and SHA-256, signature
            rank-00000-of-00002.shard
            rank-00000.json       per-rank manifest (what rank 0 waits for before committing)
            trainer_state.json    extra files, e.g. from the Hugging Face Trainer
        .staging/step-<N>/        being written; never read by resume
        .trash/                   old checkpoints are renamed here before they are deleted
        .remote/step-<N>/         files fetched from object storage for a resume
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT_NAME = "concurrent_checkpoint"
MANIFEST = "MANIFEST.json"
STAGING = ".staging"
TRASH = ".trash"
REMOTE = ".remote"
_STEP_RE = re.compile(r"^step-(\d+)$")


def step_name(step: int) -> str:
    return f"step-{step}"


def parse_step(name: str) -> int | None:
    match = _STEP_RE.match(name)
    return int(match.group(1)) if match else None


def shard_name(rank: int, world_size: int) -> str:
    return f"rank-{rank:05d}-of-{world_size:05d}.shard"


def rank_manifest_name(rank: int) -> str:
    return f"rank-{rank:05d}.json"


def complete_steps(root: Path) -> list[int]:
    """Steps whose directory holds a MANIFEST (written last, inside .staging), oldest first."""
    if not root.is_dir():
        return []
    steps = []
    for entry in os.scandir(root):
        step = parse_step(entry.name)
        if step is not None and entry.is_dir() and os.path.isfile(os.path.join(entry.path, MANIFEST)):
            steps.append(step)
    return sorted(steps)
