"""The library's exceptions about what is on disk (kept apart so that every module can raise them)."""

from __future__ import annotations


class CheckpointCorrupted(Exception):
    """A shard or manifest does not match what was written (cut short, bit rot, wrong file)."""


class UntrustedCheckpoint(CheckpointCorrupted):
    """A checkpoint this job did not write: its manifest is unsigned or signed with another key,
    or a file's bytes differ from the SHA-256 the signed manifest records."""
