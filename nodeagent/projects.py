"""The user's project directory (a placement's `workdir`): downloaded once per node, unpacked
safely, and copied for each job as its working directory.

The CLI uploads the project as a gzip'd tar to `s3://<owner bucket>/workdirs/<sha256>.tar.gz`
(sha256 of the tarball's bytes). On the node:

    <work-dir>/projects/<tenant>/<sha256>/tree/   the unpacked project (the agent's, 0700 above)
    <work-dir>/projects/<tenant>/<sha256>/complete written last: the tree is whole
    <work-dir>/projects/<tenant>/locks/<sha256>.lock  one download per project at a time

The cache is per tenant (`u<console user id>`): a tree is handed only to jobs of the owner whose
credentials fetched it (the console checks that the object is in the owner's storage, which says
nothing of whether its bytes are the ones another tenant's cached tree came from).

Unpacking refuses what could reach outside the tree or the node: absolute names, `..`, links
that point outside the tree, devices and pipes; modes lose set-uid/set-gid and write bits for
group and others; owners are the agent's (tarfile's `data` filter, plus a size cap). The job gets
a copy (its own inodes: it may change its files without changing the cache), never hard links.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import io
import os
import re
import shutil
import stat
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from .protocol import Placement, Workdir
from .storage import Storage, StorageError, describe_error, parse_s3_url

SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_UNPACKED_BYTES = 64 * 2**30  # a gzip bomb stops here (the CLI caps a project at 1 GiB packed)
MAX_MEMBERS = 1_000_000
CHUNK = 1 << 20


class ProjectError(Exception):
    """The workdir could not be made ready; the message is for the job's log and status reason."""


@dataclass(frozen=True)
class ReadyProject:
    tree: Path
    files: int
    bytes: int
    downloaded: bool  # False: it was on this node already
    seconds: float


def tenant_key(placement: Placement) -> str:
    """The cache's owner directory: the console user's id, or the job alone (an older console)."""
    tenant = placement.get("tenant")
    return f"u{int(tenant['id'])}" if tenant else f"job{int(placement['job_id'])}"


def check_workdir(spec: Workdir) -> tuple[str, str, str]:
    """(bucket, key, sha256) of a placement's workdir; ProjectError when it is malformed."""
    sha = str(spec.get("sha256") or "").lower()
    if not SHA256.fullmatch(sha):
        raise ProjectError(f"the workdir's sha256 {spec.get('sha256')!r} is not 64 hex digits")
    try:
        bucket, key = parse_s3_url(str(spec.get("url") or ""))
    except StorageError as exc:
        raise ProjectError(f"the workdir URL is not usable: {exc}") from None
    if not key:
        raise ProjectError(f"the workdir URL {spec.get('url')!r} names no object")
    return bucket, key, sha


def ensure_project(work_dir: Path, placement: Placement, storage: Storage | None,
                   say: Callable[[str], None] = lambda _: None, hold: Callable[[Path], None] = lambda _: None) -> ReadyProject:
    """The placement's project unpacked in this node's cache: from the cache, or downloaded with
    the placement's own credentials, checked against its sha256 and unpacked now (blocking).
    `hold` marks the cache entry in use before it is looked up (nodeagent.cachecap.Uses)."""
    spec = placement.get("workdir")
    assert spec is not None
    started = time.monotonic()
    bucket, key, sha = check_workdir(spec)
    root = work_dir / "projects" / tenant_key(placement)
    entry = root / sha
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    hold(entry)
    done = _complete(entry)
    if done is not None:
        return ReadyProject(entry / "tree", done["files"], done["bytes"], False, time.monotonic() - started)
    (root / "locks").mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(root / "locks" / f"{sha}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another placement of the same project: wait for its download
        done = _complete(entry)
        if done is not None:
            return ReadyProject(entry / "tree", done["files"], done["bytes"], False, time.monotonic() - started)
        if storage is None:
            raise ProjectError(f"cannot download the workdir {spec['url']}: the placement carries no object-storage "
                               "credentials (the console has no object storage configured)")
        shutil.rmtree(entry, ignore_errors=True)  # what a crashed download left
        entry.mkdir(mode=0o700, parents=True)
        try:
            size, files, total = download_unpacked(storage, bucket, key, sha, entry / "tree", spec["url"])
        except BaseException:
            shutil.rmtree(entry, ignore_errors=True)
            raise
        say(f"Downloaded and unpacked workdir {spec['url']} ({format_bytes(size)}, {time.monotonic() - started:.1f} s)")
        (entry / "complete").write_text(f"{files} {total}\n")
        return ReadyProject(entry / "tree", files, total, True, time.monotonic() - started)


def _complete(entry: Path) -> dict[str, int] | None:
    try:
        files, total = (int(word) for word in (entry / "complete").read_text().split())
    except (OSError, ValueError):
        return None
    return {"files": files, "bytes": total} if (entry / "tree").is_dir() else None


class _Hashed(io.RawIOBase):
    """A stream as a file, counted as it is read: the download (hashed too: an older CLI's
    address), or the tar in it (`unzipping`: its errors are the archive's)."""

    def __init__(self, stream: Any, unzipping: bool = False) -> None:
        self.stream, self.unzipping, self.digest, self.size = stream, unzipping, hashlib.sha256(), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = self.stream.read(len(buffer))
        except (_DownloadFailed, ProjectError):
            raise
        except Exception as exc:  # unzipping: a corrupt gzip stream; else a connection that broke off
            if self.unzipping:
                raise ProjectError(f"the workdir archive could not be unpacked: {exc}") from None
            raise _DownloadFailed(exc) from exc
        if not self.unzipping:
            self.digest.update(data)
        self.size += len(data)
        buffer[:len(data)] = data
        return len(data)

    def drain(self) -> None:
        while self.readinto(bytearray(CHUNK)):
            pass


class _DownloadFailed(Exception):
    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def download_unpacked(storage: Storage, bucket: str, key: str, sha: str, tree: Path, url: str) -> tuple[int, int, int]:
    """Unpack the project while it downloads (no archive on disk, the network and the disk at once),
    then check its sha256: that of the manifest of what was unpacked (the CLI's address since
    simpleai-workdir-3: simpleai.packing), or of the .tar.gz (older CLIs): (bytes downloaded,
    files, their bytes). Nothing is trusted before the check: the caller publishes the tree only
    once this returns, and removes it otherwise."""
    try:
        body = storage.client.get_object(Bucket=bucket, Key=key)["Body"]
    except Exception as exc:  # botocore ClientError (404/403), a connection error
        raise ProjectError(f"could not download the workdir {url}: {describe_error(exc)}") from exc
    download = _Hashed(body)
    # GzipFile, not tarfile's own "r|gz": the CLI's archive is a series of gzip members
    tar = _Hashed(gzip.GzipFile(fileobj=io.BufferedReader(download, CHUNK), mode="rb"), unzipping=True)
    manifest = hashlib.sha256(MANIFEST)
    try:
        try:
            files, total = safe_unpack(io.BufferedReader(tar, CHUNK), tree, manifest=manifest)
        finally:  # the rest (tar padding, the gzip trailer) counts too
            with contextlib.suppress(ProjectError):
                tar.drain()
            download.drain()
    except _DownloadFailed as exc:
        raise ProjectError(f"could not download the workdir {url}: {describe_error(exc.cause)}") from exc
    if sha not in (manifest.hexdigest(), download.digest.hexdigest()):
        raise ProjectError(f"the workdir {url} is not the project the job was created with: its sha256 is "
                           f"{manifest.hexdigest()}, not {sha} (was it replaced in storage?)")
    return download.size, files, total


def safe_unpack(archive: Path | BinaryIO, tree: Path, max_bytes: int = MAX_UNPACKED_BYTES,
                manifest: hashlib._Hash | None = None) -> tuple[int, int]:
    """Unpack a gzip'd tar file, or a tar stream read once, into `tree` (made here); returns
    (regular files, their bytes), and adds each entry to `manifest` as unpacked. ProjectError
    names the first entry that is refused and why; what was unpacked before it stays for the
    caller to remove."""
    tree.mkdir(mode=0o700)
    files = total = 0
    try:
        with (tarfile.open(archive, "r:gz") if isinstance(archive, Path) else tarfile.open(fileobj=archive, mode="r|")) as tar:
            for count, member in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise ProjectError(f"the workdir holds more than {MAX_MEMBERS} entries")
                problem = unsafe_member(member)
                if problem:
                    raise ProjectError(f"the workdir archive holds an entry that is refused: {member.name!r} ({problem})")
                if member.isfile():
                    files += 1
                    total += member.size
                    if total > max_bytes:
                        raise ProjectError(f"the workdir unpacks to more than {format_bytes(max_bytes)}")
                # the `data` filter checks again what it writes (names, links, modes, owners)
                # (it also drops owners: the files are the agent's), and drops set-uid and group/other write bits
                tar.extract(member, tree, filter="data")
                if manifest is not None:
                    manifest.update(manifest_entry(member, tree))
    except (ProjectError, _DownloadFailed):
        raise
    except tarfile.FilterError as exc:
        raise ProjectError(f"the workdir archive holds an entry that is refused: {exc}") from None
    except Exception as exc:  # TarError, EOFError, OSError, zlib.error (a corrupt gzip stream)
        raise ProjectError(f"the workdir archive could not be unpacked: {exc}") from None
    return files, total


MANIFEST = b"simpleai-manifest-1\n"


def manifest_entry(member: tarfile.TarInfo, tree: Path) -> bytes:
    """The member's line of the project's manifest, its file's digest read from what was unpacked:
    as simpleai.packing.manifest_entry writes it from the project's files."""
    kind = "dir" if member.isdir() else "link" if member.issym() else "file" if member.isfile() else "hardlink"
    digest = ""
    if member.isfile():
        with open(os.open(tree / member.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as file:
            digest = hashlib.file_digest(file, "sha256").hexdigest()
    size = member.size if member.isfile() else 0
    return (f"{kind}\0{member.name}\0{member.mode & 0o7777:o}\0{size}\0{member.linkname}\0{digest}\n"
            .encode("utf-8", "surrogateescape"))


def unsafe_member(member: tarfile.TarInfo) -> str:
    """Why a tar entry may not be unpacked ("" when it may)."""
    name = member.name
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "an absolute path"
    parts = [part for part in name.replace("\\", "/").split("/") if part not in ("", ".")]
    if ".." in parts:
        return "a path with '..'"
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        return "a device, pipe or other special file"
    if member.issym() or member.islnk():
        target = member.linkname
        if target.startswith("/"):
            return f"a link to the absolute path {target}"
        base = parts[:-1] if member.issym() else []  # a hard link's target is relative to the archive's root
        resolved: list[str] = list(base)
        for part in target.replace("\\", "/").split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if not resolved:
                    return f"a link that points outside the project ({target})"
                resolved.pop()
            else:
                resolved.append(part)
    return ""


def copy_tree(tree: Path, workdir: Path) -> tuple[int, list[str]]:
    """Copy the project into the job's working directory (its own inodes; links as links).
    A name that is there already (the training script downloaded for the job, its OUTPUT_DIR)
    is kept; returns (files copied, the names kept)."""
    copied = 0
    kept: list[str] = []
    for directory, dirs, names in os.walk(tree):
        relative = Path(directory).relative_to(tree)
        target_dir = workdir / relative
        for name in sorted(dirs):
            source, target = Path(directory) / name, target_dir / name
            if source.is_symlink():
                names.append(name)  # os.walk lists a link to a directory among the directories
                continue
            if target.is_symlink() or (target.exists() and not target.is_dir()):
                kept.append((relative / name).as_posix())
                dirs.remove(name)
                continue
            target.mkdir(mode=0o700, exist_ok=True)
        for name in sorted(names):
            source, target = Path(directory) / name, target_dir / name
            if target.exists() or target.is_symlink():
                kept.append((relative / name).as_posix())
                continue
            if source.is_symlink():
                os.symlink(os.readlink(source), target)
            else:
                shutil.copyfile(source, target, follow_symlinks=False)
                os.chmod(target, stat.S_IMODE(source.stat().st_mode) | 0o600)
            copied += 1
    return copied, kept


def hand_project(tree: Path, workdir: Path, laid: bool) -> tuple[list[str], str]:
    """The project for one job: laid under its directory by the runtime (`laid`: nothing to do
    here), or copied into it; (the names the job's directory kept, how it got the project)."""
    if laid:
        return shadowed(tree, workdir), "laid under the job's working directory (copy-on-write: its writes stay its own)"
    started = time.monotonic()
    _, kept = copy_tree(tree, workdir)
    return kept, f"copied into the job's working directory in {time.monotonic() - started:.1f} s"


def shadowed(tree: Path, workdir: Path) -> list[str]:
    """What of the project the job's directory holds already (its downloaded script, its
    OUTPUT_DIR's files): under a copy-on-write view these win, as copy_tree keeps them."""
    kept: list[str] = []
    for directory, dirs, names in os.walk(workdir):
        relative = Path(directory).relative_to(workdir)
        for name in [*dirs, *names]:
            mine, project = Path(directory) / name, tree / relative / name
            if not os.path.lexists(project):
                continue
            if name in dirs and project.is_dir() and not project.is_symlink() and not mine.is_symlink():
                continue  # both directories: merged, as copy_tree merges them
            kept.append((relative / name).as_posix())
        dirs[:] = [name for name in dirs if (tree / relative / name).is_dir()]
    return sorted(kept)


def format_bytes(count: float) -> str:
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if count < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")
