"""Partial recovery on the node: a resumed attempt reuses what this node prepared for the last one.

When one node of a gang fails, the console places the job's next attempt on the healthy
nodes again, each at the rank it had (jobs.regang). Such a node still holds the interrupted
attempt's working directory

    <work-dir>/jobs/<job_id>/attempt-<k>/<role>/            the training script, the project, ...
    <work-dir>/jobs/<job_id>/attempt-<k>/<role>/output/concurrent_checkpoint/step-<N>/

so the new attempt takes it over instead of preparing again: the files are hard-linked into
the new attempt's directory (nothing is downloaded or pulled), and the checkpoint it resumes
from (CKPT_LAST_STEP) is linked into its OUTPUT_DIR, where the checkpoint library finds it
on local disk instead of fetching it from object storage.

Only an attempt whose marker says it exited is taken over: its command is over, so nothing of
the old attempt writes into the files the new one uses (the fencing of a stale placement by
attempt number stays whole). Its own OUTPUT_DIR was uploaded when it ended; only the
checkpoint step the new attempt resumes from is carried over, not the old attempt's results.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from .protocol import Placement
from .workdirs import AttemptPaths, attempt_paths

log = logging.getLogger(__name__)

CHECKPOINT_ROOT = "concurrent_checkpoint"  # the library's directory in OUTPUT_DIR (layout.ROOT_NAME)


def identity(placement: Placement) -> dict[str, str]:
    """What the prepared files depend on: a later attempt reuses them only when this is equal."""
    workdir = placement.get("workdir")
    return {
        "script_url": placement.get("script_url") or "", "image": placement.get("image") or "",
        "workdir": workdir["sha256"] if workdir else "",
        "inputs": json.dumps(placement.get("inputs") or [], sort_keys=True),
    }


@dataclass(frozen=True)
class Reused:
    attempt: int
    files: int
    checkpoint_step: int | None

    def line(self) -> str:
        kept = f"its working directory ({self.files} file{'' if self.files == 1 else 's'})"
        if self.checkpoint_step is not None:
            kept += f" and its local copy of checkpoint step {self.checkpoint_step}"
        return (f"Partial recovery: this node ran attempt {self.attempt} of the job; reusing {kept}; "
                "nothing downloaded, the environment is warm")


def previous(work_dir: Path, placement: Placement) -> tuple[int, AttemptPaths] | None:
    """The job's interrupted attempt (the one just before), if this node ran it with the same
    role, it exited and it prepared the same things; None otherwise, or unless the console
    allows reuse. An older attempt's directory is never taken: its files may be stale."""
    number = int(placement["attempt"]) - 1
    if not placement.get("reuse_previous") or number < 1:
        return None
    paths = attempt_paths(work_dir, {**placement, "attempt": number})
    try:
        marker = json.loads(paths.marker.read_text())
    except (OSError, ValueError):
        return None
    if marker.get("state") != "exited" or marker.get("prepared") != identity(placement) or not paths.workdir.is_dir():
        return None
    return number, paths


def take_over(work_dir: Path, placement: Placement, target: AttemptPaths) -> Reused | None:
    """Link the previous attempt's prepared files (and the checkpoint to resume from) into
    `target`; None when there is nothing to reuse (the caller prepares as usual). Blocking."""
    found = previous(work_dir, placement)
    if found is None:
        return None
    number, source = found
    try:
        files = _link_tree(source.workdir, target.workdir, skip=source.output_dir)
        step = placement.get("resume_step")
        carried = _link_checkpoint(source.output_dir, target.output_dir, step) if step is not None else False
    except OSError as exc:  # a half-linked directory: clear it, the caller prepares from scratch
        log.warning("job %s: could not reuse attempt %s: %s", placement["job_id"], number, exc)
        _empty(target)
        return None
    return Reused(number, files, step if carried else None)


def _link_tree(source: Path, target: Path, skip: Path) -> int:
    count = 0
    for directory, dirs, names in os.walk(source):
        here = Path(directory)
        dirs[:] = [d for d in dirs if here / d != skip]
        into = target / here.relative_to(source)
        into.mkdir(mode=0o700, exist_ok=True)
        for name in dirs:
            if (here / name).is_symlink():
                os.symlink(os.readlink(here / name), into / name)
        dirs[:] = [d for d in dirs if not (here / d).is_symlink()]
        for name in names:
            if (here / name).is_symlink():
                os.symlink(os.readlink(here / name), into / name)
            else:
                _link(here / name, into / name)
                count += 1
    return count


def _link_checkpoint(source_output: Path, target_output: Path, step: int) -> bool:
    """Link step-<step> (complete: its manifest is there) into the new OUTPUT_DIR."""
    name = f"step-{step}"
    for candidate in (source_output / CHECKPOINT_ROOT / name, source_output / CHECKPOINT_ROOT / ".remote" / name):
        if (candidate / "MANIFEST.json").is_file():
            destination = target_output / CHECKPOINT_ROOT / candidate.relative_to(source_output / CHECKPOINT_ROOT)
            destination.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            shutil.copytree(candidate, destination, copy_function=_link, symlinks=True)
            return True
    return False


def _link(source: os.PathLike[str] | str, target: os.PathLike[str] | str) -> str:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(source, target)
    return str(target)


def _empty(paths: AttemptPaths) -> None:
    """Back to what AttemptPaths.create left: an empty working directory and OUTPUT_DIR."""
    shutil.rmtree(paths.workdir, ignore_errors=True)
    paths.workdir.mkdir(mode=0o700, exist_ok=True)
    paths.output_dir.mkdir(mode=0o700, exist_ok=True)
