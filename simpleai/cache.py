"""What the CLI remembers between runs on this laptop: the SHA-256 of each project it packed and
of each input it hashed, by a fingerprint of their files' names, sizes and stamps
(simpleai.packing.fingerprint, simpleai.storage), so an unchanged project is neither packed nor
uploaded again, and unchanged data is not read again to be hashed. $XDG_CACHE_HOME/simpleai/workdirs.json (~/.cache/… when unset); losing
it costs one packing, nothing else.

Beside it, files.json: the SHA-256 of each file of the last projects, by its size and stamp, so
a project with one changed file reads only that file for its address (simpleai.packing)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .packing import Listing

KEEP = 200  # projects remembered (the oldest are forgotten first)
KEEP_FILES = 20  # projects whose files' digests are remembered


def cache_path(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "simpleai" / "workdirs.json"


def _read(path: Path) -> dict[str, str]:
    data = _load(path)
    return {str(k): str(v) for k, v in data.items()}


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: object) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-")
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            json.dump(data, file)
        os.replace(name, path)
    except OSError:
        pass


def known_files(env: Mapping[str, str], listing: Listing) -> dict[str, str]:
    """The SHA-256 of each file of the project (a simpleai.packing.Listing) that is as it was
    when its digest was remembered (size and stamp), by path."""
    remembered = _load(cache_path(env).with_name("files.json")).get(str(listing.root))
    if not isinstance(remembered, dict):
        return {}
    known = {}
    for entry in listing.files:
        record = remembered.get(entry.path)
        if isinstance(record, list) and record[:4] == [entry.size, *entry.stamp] and isinstance(record[-1], str):
            known[entry.path] = record[-1]
    return known


def remember_files(env: Mapping[str, str], listing: Listing, digests: Mapping[str, str]) -> None:
    """Best effort, as `remember`; the last KEEP_FILES projects."""
    path = cache_path(env).with_name("files.json")
    projects = _load(path)
    projects.pop(str(listing.root), None)
    projects[str(listing.root)] = {entry.path: [entry.size, *entry.stamp, digests[entry.path]]
                                   for entry in listing.files if entry.path in digests}
    _write(path, dict(list(projects.items())[-KEEP_FILES:]))


def packed_sha256(env: Mapping[str, str], fingerprint: str) -> str | None:
    return _read(cache_path(env)).get(fingerprint)


def remember(env: Mapping[str, str], fingerprint: str, sha256: str) -> None:
    """Best effort: a cache that cannot be written is no cache."""
    path = cache_path(env)
    known = _read(path)
    known.pop(fingerprint, None)
    known[fingerprint] = sha256
    _write(path, dict(list(known.items())[-KEEP:]))
