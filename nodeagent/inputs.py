"""A placement's inputs: data in the owner's object storage, synced onto the node before the
command starts and shown to it as $SIMPLEAI_INPUT_<NAME> (the name upper-cased).

An input's URL names one object (`s3://bucket/key`: the variable names that file) or a prefix
(`s3://bucket/prefix/`: the variable names a directory holding the prefix's tree). Everything is
read with the placement's own credentials (its owner's storage space, nothing else). On the node:

    <work-dir>/inputs/<tenant>/blobs/<sha256(etag, size)>   each object's bytes, once per node
    <work-dir>/inputs/<tenant>/trees/<sha256(listing)>/tree/ the input as the job sees it: hard links
                                                           to the blobs, read-only (files 0444)
    <work-dir>/inputs/<tenant>/trees/<sha256(listing)>/complete
    <work-dir>/inputs/<tenant>/locks/

The listing (every object's relative path, size and ETag) is asked of the storage each time, with
the owner's keys: an unchanged input is not downloaded again, a changed file is, and what another
tenant synced is never handed over (the cache is per tenant). The job's log shows the progress
(bytes, files, rate). Under the sandbox the tree is bound read-only into the job; the Docker
runtime mounts it read-only at /simpleai/inputs/<NAME>.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .cachecap import syncing_blobs
from .projects import format_bytes
from .protocol import InputSpec, Placement
from .storage import Storage, StorageError, describe_error, parse_s3_url

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
MAX_INPUTS = 16
PROGRESS_EVERY = 2.0  # seconds between progress lines while an input downloads
PARALLEL_DOWNLOADS = 8
MULTIPART_FROM = 8 * 2**20  # bytes: boto3's own threshold for ranged downloads


class InputError(Exception):
    """An input could not be synced; the message is for the job's log and status reason."""


def variable(name: str) -> str:
    """The environment variable of an input: SIMPLEAI_INPUT_<NAME upper-cased>."""
    if not NAME.fullmatch(name or ""):
        raise InputError(f"the input name {name!r} is not a letter followed by up to 31 letters, digits or '_'")
    return f"SIMPLEAI_INPUT_{name.upper()}"


@dataclass(frozen=True)
class RemoteObject:
    key: str
    relative: str  # where it lands in the input's tree
    size: int
    etag: str

    @property
    def blob(self) -> str:
        return hashlib.sha256(f"{self.etag}\0{self.size}".encode()).hexdigest()[:40]


@dataclass(frozen=True)
class Listing:
    url: str
    bucket: str
    single: bool  # one object: the variable names the file, not the directory
    objects: tuple[RemoteObject, ...]

    @property
    def total_bytes(self) -> int:
        return sum(item.size for item in self.objects)

    @property
    def key(self) -> str:
        text = json.dumps([self.bucket, self.single, [(o.relative, o.size, o.etag) for o in self.objects]])
        return hashlib.sha256(text.encode()).hexdigest()[:40]


@dataclass
class Synced:
    name: str
    path: Path  # what the variable names (a file for a single object, else the tree)
    tree: Path  # the directory to mount
    files: int
    bytes: int
    downloaded_files: int = 0
    downloaded_bytes: int = 0
    seconds: float = 0.0
    messages: list[str] = field(default_factory=list)


def safe_relative(relative: str) -> str:
    """An object key's part below its prefix as a relative path; InputError when it could leave the tree."""
    parts = relative.split("/")
    if relative.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise InputError(f"the object {relative!r} has a name that cannot be a path on the node ('', '.' or '..' in it)")
    return relative


def list_input(storage: Storage, spec: InputSpec, own_bucket: str | None) -> Listing:
    """What the input's URL names, asked of the storage with the placement's credentials."""
    url = spec["url"]
    try:
        bucket, key = parse_s3_url(url)
    except StorageError as exc:
        raise InputError(f"Input {spec['name']}: {exc}") from None
    if own_bucket and bucket != own_bucket:
        raise InputError(f"Input {spec['name']}: {url} is not in the job owner's storage space (s3://{own_bucket}/)")
    client = storage.client
    try:
        if key and not key.endswith("/"):
            try:
                head = client.head_object(Bucket=bucket, Key=key)
            except Exception as exc:
                if describe_error(exc) != "no such object":
                    raise
            else:
                name = key.rsplit("/", 1)[-1]
                return Listing(url, bucket, True, (RemoteObject(key, name, int(head["ContentLength"]), str(head.get("ETag", ""))),))
            key += "/"  # not an object: a prefix written without its slash
        objects = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key):
            for item in page.get("Contents", []):
                if item["Key"].endswith("/"):
                    continue  # a "folder" marker some tools write
                relative = safe_relative(item["Key"][len(key):])
                objects.append(RemoteObject(item["Key"], relative, int(item["Size"]), str(item.get("ETag", ""))))
    except InputError as exc:
        raise InputError(f"Input {spec['name']} ({url}): {exc}") from None
    except Exception as exc:  # ClientError (403, NoSuchBucket), a connection error
        raise InputError(f"Input {spec['name']}: could not list {url}: {describe_error(exc)}") from exc
    if not objects:
        raise InputError(f"Input {spec['name']}: {url} names no object and no prefix holding objects")
    return Listing(url, bucket, False, tuple(sorted(objects, key=lambda o: o.relative)))


def format_progress(name: str, done_bytes: int, total_bytes: int, done_files: int, total_files: int, seconds: float) -> str:
    """One progress line of the job's log: bytes, files and rate."""
    rate = done_bytes / seconds if seconds > 0 else 0.0
    percent = f" ({100 * done_bytes / total_bytes:.0f}%)" if total_bytes else ""
    return (f"Input {name}: {format_bytes(done_bytes)} of {format_bytes(total_bytes)}{percent}, "
            f"{done_files} of {total_files} files, {format_bytes(rate)}/s")


def sync_input(work_dir: Path, tenant: str, spec: InputSpec, storage: Storage, own_bucket: str | None,
               say: Callable[[str], None], clock: Callable[[], float] = time.monotonic,
               hold: Callable[[Path], None] = lambda _: None) -> Synced:
    """The input on this node (blocking): listed, the missing objects downloaded, its tree made."""
    started = clock()
    listing = list_input(storage, spec, own_bucket)
    root = work_dir / "inputs" / tenant
    for folder in (root / "blobs", root / "trees", root / "locks"):
        folder.mkdir(mode=0o711 if folder.name != "locks" else 0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o711)  # the jobs reach their trees through it (the sandbox binds them read-only)
    entry = root / "trees" / listing.key
    tree = entry / "tree"
    total_files, total_bytes = len(listing.objects), listing.total_bytes

    def result(downloaded_files: int = 0, downloaded_bytes: int = 0) -> Synced:
        path = tree / listing.objects[0].relative if listing.single else tree
        return Synced(spec["name"], path, tree, total_files, total_bytes, downloaded_files, downloaded_bytes,
                      clock() - started)

    hold(entry)  # in use from before the look: the node's cache cap never evicts it meanwhile
    if (entry / "complete").is_file():
        return result()
    with open(root / "locks" / f"{listing.key}.lock", "w") as lock, syncing_blobs(root):
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (entry / "complete").is_file():
            return result()
        missing = [item for item in listing.objects if not (root / "blobs" / item.blob).is_file()]
        need = sum(item.size for item in missing)
        say(f"Input {spec['name']}: {listing.url} holds {total_files} file{'' if total_files == 1 else 's'} "
            f"({format_bytes(total_bytes)}); downloading {len(missing)} ({format_bytes(need)}), "
            f"{total_files - len(missing)} already on this node")
        progress = _Progress(spec["name"], need, len(missing), say, clock)
        # several objects at once: a tree of many small files is bound by round trips, not bandwidth
        with ThreadPoolExecutor(max_workers=PARALLEL_DOWNLOADS) as pool:
            for future in [pool.submit(_download_blob, storage, listing.bucket, item, root / "blobs", progress)
                           for item in missing]:
                future.result()  # the first failure is raised (the rest finish or fail on their own)
        progress.finish()
        shutil.rmtree(entry, ignore_errors=True)
        building = entry.with_name(f"{entry.name}.building")
        shutil.rmtree(building, ignore_errors=True)
        (building / "tree").mkdir(mode=0o755, parents=True)
        for item in listing.objects:
            target = building / "tree" / item.relative
            if not target.parent.is_dir():
                target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            try:
                os.link(root / "blobs" / item.blob, target)
            except FileExistsError:
                raise InputError(f"Input {spec['name']}: two objects land on the same path {item.relative}") from None
        os.chmod(building, 0o711)
        (building / "complete").write_text(json.dumps({"url": listing.url, "files": total_files, "bytes": total_bytes}))
        os.replace(building, entry)
        return result(len(missing), need)


class _Progress:
    """Bytes counted from the transfer threads; a line at most every PROGRESS_EVERY seconds."""

    def __init__(self, name: str, total_bytes: int, total_files: int, say: Callable[[str], None],
                 clock: Callable[[], float]) -> None:
        self.name, self.total_bytes, self.total_files, self.say, self.clock = name, total_bytes, total_files, say, clock
        self.bytes = self.files = 0
        self.started = self.last = clock()
        self.lock = threading.Lock()

    def add(self, count: int) -> None:
        with self.lock:
            self.bytes += count
            now = self.clock()
            if now - self.last >= PROGRESS_EVERY:
                self.last = now
                self.say(format_progress(self.name, self.bytes, self.total_bytes, self.files, self.total_files, now - self.started))

    def file_done(self) -> None:
        with self.lock:
            self.files += 1

    def finish(self) -> None:
        if self.total_files:
            self.say(format_progress(self.name, self.bytes, self.total_bytes, self.files, self.total_files,
                                     self.clock() - self.started))


def _download_blob(storage: Storage, bucket: str, item: RemoteObject, blobs: Path, progress: _Progress) -> None:
    target = blobs / item.blob
    partial = blobs / f"{item.blob}.{os.getpid()}.{threading.get_ident()}.part"
    try:
        if item.size >= MULTIPART_FROM:  # ranged parts in parallel
            storage.client.download_file(bucket, item.key, str(partial), Callback=progress.add)
        else:  # one request: a transfer manager per small object costs more than the object
            body = storage.client.get_object(Bucket=bucket, Key=item.key)["Body"]
            with open(partial, "wb") as handle:
                for chunk in iter(lambda: body.read(1 << 20), b""):
                    handle.write(chunk)
                    progress.add(len(chunk))
        size = partial.stat().st_size
        if size != item.size:
            raise InputError(f"s3://{bucket}/{item.key} changed while it was downloaded ({size} bytes, listed {item.size})")
        os.chmod(partial, 0o444)  # the jobs read it; nobody writes it (hard-linked into every tree)
        os.replace(partial, target)
    except InputError as exc:
        partial.unlink(missing_ok=True)
        raise InputError(f"Input {progress.name}: {exc}") from None
    except Exception as exc:
        partial.unlink(missing_ok=True)
        raise InputError(f"Input {progress.name}: could not download s3://{bucket}/{item.key}: {describe_error(exc)}") from exc
    progress.file_done()


def sync_inputs(work_dir: Path, placement: Placement, storage: Storage | None, say: Callable[[str], None],
                tenant: str, hold: Callable[[Path], None] = lambda _: None) -> list[Synced]:
    """Every input of the placement, in its order (blocking); InputError on the first that fails."""
    specs = placement.get("inputs") or []
    if not specs:
        return []
    if len(specs) > MAX_INPUTS:
        raise InputError(f"a job has at most {MAX_INPUTS} inputs, not {len(specs)}")
    names: dict[str, str] = {}
    for spec in specs:
        upper = variable(spec.get("name", ""))
        if upper in names:
            raise InputError(f"the inputs {names[upper]!r} and {spec['name']!r} have the same variable {upper}")
        names[upper] = spec["name"]
    if storage is None:
        raise InputError("cannot sync the inputs: the placement carries no object-storage credentials "
                         "(the console has no object storage configured)")
    storage_spec = placement.get("storage")
    own_bucket = storage_spec["bucket"] if storage_spec else None
    synced = []
    for spec in specs:
        item = sync_input(work_dir, tenant, spec, storage, own_bucket, say, hold=hold)
        rate = f", {format_bytes(item.downloaded_bytes / item.seconds)}/s" if item.downloaded_bytes and item.seconds > 0 else ""
        source = ("from this node's cache" if not item.downloaded_files
                  else f"{item.downloaded_files} downloaded ({format_bytes(item.downloaded_bytes)} in {item.seconds:.1f} s{rate})")
        say(f"Input {spec['name']} ready at ${variable(spec['name'])}: {item.files} file{'' if item.files == 1 else 's'}, "
            f"{format_bytes(item.bytes)}, {source}")
        synced.append(item)
    return synced
