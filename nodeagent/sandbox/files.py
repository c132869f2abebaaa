"""Who owns what on disk: the agent's state is root's alone; a working directory is the job's
while it runs and the agent's again afterwards.

    <work-dir>/                                   0700, the agent's (spool, warm pool, jobs)
    <work-dir>/jobs/<job>/attempt-<n>/            0711, the agent's: the markers beside the
                                                  working directories are 0600
    <work-dir>/jobs/<job>/attempt-<n>/<role>/     0700, the job's user while it runs
    <work-dir>/jobs/<job>/attempt-<n>/<role>/.home  HOME (0700, the job's user)

A job reaches its working directory through its own mount namespace (the launcher binds it
back under a tmpfs that covers the agent's directories), never through the agent's tree.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

HOME_NAME = ".home"  # in the working directory, as under the Docker runtime


def private_directory(path: Path, mode: int = 0o700) -> None:
    """Make `path` (and its parents) and leave it with `mode`, whatever it had."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)


def give_tree(workdir: Path, output_dir: Path, uid: int, gid: int, *, kept_readable: bool) -> Path:
    """Make HOME in the working directory and give the directories and the files made for this
    attempt (under the working directory and OUTPUT_DIR) to uid:gid; returns HOME.

    A file hard-linked from the warm pool's kept copy (nodeagent.warm) stays the agent's: the job
    may read and replace it but never change the copy a later job starts from (`kept_readable`:
    made readable to all where it was not). Links are never followed. Both runtimes use this."""
    home = workdir / HOME_NAME
    home.mkdir(mode=0o700, exist_ok=True)
    for top in _tops(workdir, output_dir):
        for directory, dirs, files in os.walk(top):  # does not enter linked directories
            os.lchown(directory, uid, gid)
            for name in [*files, *dirs]:
                path = os.path.join(directory, name)
                found = os.lstat(path)
                if stat.S_ISLNK(found.st_mode) or (not stat.S_ISDIR(found.st_mode) and found.st_nlink == 1):
                    os.lchown(path, uid, gid)
                elif kept_readable and stat.S_ISREG(found.st_mode) and found.st_mode & 0o444 != 0o444:
                    os.chmod(path, found.st_mode | 0o444)  # a kept file: the job must read it
    return home


def take_tree_back(workdir: Path, output_dir: Path, uid: int, owner: tuple[int, int], *, keep_linked_files: bool) -> None:
    """Whatever uid owns under the working directory and OUTPUT_DIR becomes owner's (links
    themselves, not what they point at; the chown clears set-uid bits). `keep_linked_files`: a
    regular file with other links (the job linked it from its File Storage share) is left as it is."""
    for top in _tops(workdir, output_dir):
        with contextlib.suppress(FileNotFoundError):
            if os.lstat(top).st_uid == uid:
                os.lchown(top, *owner)
        for directory, dirs, files in os.walk(top):
            for name in [*dirs, *files]:
                path = os.path.join(directory, name)
                with contextlib.suppress(FileNotFoundError):
                    found = os.lstat(path)
                    if found.st_uid != uid:
                        continue
                    if keep_linked_files and stat.S_ISREG(found.st_mode) and found.st_nlink > 1:
                        continue
                    os.lchown(path, *owner)


def hand_over(workdir: Path, output_dir: Path, uid: int, gid: int) -> Path:
    """Give the working directory, OUTPUT_DIR and a fresh HOME to the job's user; returns HOME.
    A kept file (warm pool) stays the agent's, readable (give_tree)."""
    home = give_tree(workdir, output_dir, uid, gid, kept_readable=True)
    os.chmod(workdir, 0o700)
    os.chmod(home, 0o700)
    return home


def hand_back(workdir: Path, output_dir: Path, uid: int) -> None:
    """After the placement: what the job's user owns there becomes root's again, so that the user
    can be handed to another placement, which then can read nothing of this one. A file the job
    linked from elsewhere (its File Storage share) is left as it is: it is its tenant's."""
    take_tree_back(workdir, output_dir, uid, (0, 0), keep_linked_files=True)
    with contextlib.suppress(FileNotFoundError):
        os.chmod(workdir, 0o700)


def _tops(workdir: Path, output_dir: Path) -> list[Path]:
    return [workdir] if output_dir.is_relative_to(workdir) else [workdir, output_dir]
