"""Where an attempt lives on the node, and the marker file that outlives the agent process.

    <work-dir>/jobs/<job_id>/attempt-<n>/<role>/          the command's working directory
    <work-dir>/jobs/<job_id>/attempt-<n>/<role>/output/   OUTPUT_DIR
    <work-dir>/jobs/<job_id>/attempt-<n>/<role>.agent.json the marker (beside, not inside, the
                                                            user's directory)

The agent's: <work-dir> 0700, the attempt's directory 0711 (nothing in it can be listed), the
marker 0600. The working directory is handed to the placement's own user while it runs
(nodeagent.sandbox.files), who reaches it through its own mount namespace only.

The marker says whether this node ever started the placement and how far it got. The
supervisor relies on it twice: a placement whose directory exists is never started again
(an attempt runs once per node), and after an agent restart a marker that is not `exited`
names a command the new agent must stop and report (see supervisor.recover).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .protocol import Placement

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class AttemptPaths:
    workdir: Path
    output_dir: Path
    marker: Path

    def exists(self) -> bool:
        return self.workdir.exists() or self.marker.exists()

    def create(self) -> None:
        self.workdir.parent.mkdir(mode=0o711, parents=True, exist_ok=True)
        os.chmod(self.workdir.parent, 0o711)  # whatever the umask said
        self.workdir.mkdir(mode=0o700, exist_ok=False)
        os.chmod(self.workdir, 0o700)
        self.output_dir.mkdir(mode=0o700)


def attempt_paths(work_dir: Path, placement: Placement) -> AttemptPaths:
    role = _UNSAFE.sub("_", placement["role"]) or "_"  # the role names a directory: no "/" or ".."
    root = work_dir / "jobs" / str(int(placement["job_id"])) / f"attempt-{int(placement['attempt'])}"
    workdir = root / role
    return AttemptPaths(workdir=workdir, output_dir=workdir / "output", marker=root / f"{role}.agent.json")


def write_marker(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(json.dumps(data))
    os.replace(tmp, path)  # atomic: a crash leaves the old marker or the new one


def read_markers(work_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    found = []
    for path in sorted((work_dir / "jobs").glob("*/attempt-*/*.agent.json")):
        try:
            found.append((path, json.loads(path.read_text())))
        except (OSError, ValueError):
            continue
    return found
