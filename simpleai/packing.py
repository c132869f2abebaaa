"""A project directory as one gzip'd tar whose bytes depend only on the files' names and contents.

Sorted entries, modification times 0, owner 0:0 without names, modes normalised (0644 for a
file, 0755 for a directory or an executable file), gzip members without a name or time: the
same tree gives the same tar and the same SHA-256, so the console's storage keeps one copy of
it (workdirs/<sha256>.tar.gz) and a node that unpacked it once does not fetch it again.

The address is the SHA-256 of the project's manifest (`project_sha256`: each entry's kind,
path, mode, size, link target and its file's SHA-256, in the tar's order), so it is known before
the project is packed, and an unchanged file is not even read for it (simpleai.cache keeps each
file's digest by its stamp): the packing then streams into the upload (simpleai.storage),
compressing and sending at once, and checks on the way that what it sends has the manifest it
named. A node builds the same manifest from what it unpacks (nodeagent.projects).

The gzip is a series of members of 1 MiB of tar each (any gunzip, and Python's tarfile, read them
as one stream): a piece that does not compress (weights, images, archives) is stored as it is,
the rest compressed, so a project of binaries packs at disk speed instead of zlib's.

Left out: `.git/`, whatever the project's `.gitignore` and `.simpleaiignore` files ignore,
sockets and other special files, and links that lead out of the project (data belongs in an
input: --input NAME=PATH).
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import struct
import tarfile
import tempfile
import zlib
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from . import ignore
from .errors import UsageError

MiB = 1024 * 1024
DEFAULT_MAX_MB = 1024  # SIMPLEAI_MAX_WORKDIR_MB
ALWAYS_SKIPPED = frozenset({".git"})
BIGGEST_SHOWN = 5
CHUNK = 1024 * 1024


class Sink(Protocol):
    """Where packed bytes go: a file, or an upload (simpleai.s3lite.MultipartUpload)."""

    def write(self, data: bytes, /) -> int: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Entry:
    path: str  # relative to the project root, `/` between parts
    kind: str  # "file", "dir" or "link"
    size: int = 0
    executable: bool = False
    target: str = ""  # a link's target, as written (relative, inside the project)
    # a file's (inode, mtime_ns, ctime_ns): not packed; a changed file changes them (as git's index assumes)
    stamp: tuple[int, int, int] = (0, 0, 0)


@dataclass
class Listing:
    root: Path
    entries: list[Entry]
    skipped_links: list[str] = field(default_factory=list)  # "path -> target" of links leaving the project

    @property
    def files(self) -> list[Entry]:
        return [entry for entry in self.entries if entry.kind != "dir"]

    @property
    def size(self) -> int:
        return sum(entry.size for entry in self.entries)


@dataclass(frozen=True)
class Packed:
    path: Path  # the .tar.gz (a temporary file: the caller removes it)
    sha256: str
    files: int
    size: int  # the files' bytes, before compression
    compressed: int

    @property
    def key(self) -> str:
        return workdir_key(self.sha256)


def workdir_key(sha256: str) -> str:
    """Where a project's tarball is in its owner's bucket."""
    return f"workdirs/{sha256}.tar.gz"


def list_project(root: Path) -> Listing:
    """The entries that go into the project's tarball, sorted by path."""
    root = root.resolve()
    if not root.is_dir():
        raise UsageError(f"{root} is not a directory: --workdir names your project's directory")
    listing = Listing(root, [])
    _walk(root, "", ignore.rules_in(root, ""), listing)
    listing.entries.sort(key=lambda entry: entry.path)
    return listing


def _walk(root: Path, relative: str, rules: list[ignore.Rule], listing: Listing) -> None:
    directory = root / relative if relative else root
    try:
        children = sorted(os.scandir(directory), key=lambda child: child.name)
    except OSError as error:
        raise UsageError(f"cannot read {directory}: {error.strerror}") from None
    for child in children:
        path = f"{relative}/{child.name}" if relative else child.name
        if child.name in ALWAYS_SKIPPED:
            continue
        if child.is_symlink():
            if not ignore.is_ignored(rules, path, child.is_dir()):
                _add_link(root, path, child, listing)
            continue
        is_dir = child.is_dir(follow_symlinks=False)
        if ignore.is_ignored(rules, path, is_dir):
            continue
        if is_dir:
            listing.entries.append(Entry(path, "dir"))
            _walk(root, path, rules + ignore.rules_in(Path(child.path), path), listing)
        elif child.is_file(follow_symlinks=False):
            info = child.stat(follow_symlinks=False)
            listing.entries.append(Entry(path, "file", info.st_size, bool(info.st_mode & 0o111),
                                         stamp=(info.st_ino, info.st_mtime_ns, info.st_ctime_ns)))


def _add_link(root: Path, path: str, child: os.DirEntry[str], listing: Listing) -> None:
    """A link stays a link when it points inside the project (relative); otherwise it is left out."""
    target = os.readlink(child.path)
    resolved = (Path(child.path).parent / target).resolve()
    inside = not os.path.isabs(target) and (resolved == root or root in resolved.parents)
    if inside and resolved.exists():
        listing.entries.append(Entry(path, "link", target=target))
    else:
        listing.skipped_links.append(f"{path} -> {target}")


FORMAT = "simpleai-workdir-3"  # changes when the packing changes: older fingerprints no longer match


def fingerprint(listing: Listing) -> str:
    """What the project's tarball depends on, cheaply: every entry's path, kind, size, mode, link
    target and file stamp, and where the project is. The same fingerprint means the same tarball,
    so a cached SHA-256 spares packing an unchanged project again."""
    hasher = hashlib.sha256(f"{FORMAT}\0{listing.root}\0".encode())
    for entry in listing.entries:
        hasher.update(f"{entry.path}\0{entry.kind}\0{entry.size}\0{entry.executable:d}\0{entry.target}\0{entry.stamp}\n"
                      .encode("utf-8", "surrogateescape"))
    return hasher.hexdigest()


def max_bytes(env: dict[str, str] | None = None) -> int:
    """The cap on a project's size: SIMPLEAI_MAX_WORKDIR_MB (MiB), 1 GiB by default."""
    text = (env if env is not None else os.environ).get("SIMPLEAI_MAX_WORKDIR_MB", "").strip()
    if not text:
        return DEFAULT_MAX_MB * MiB
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"SIMPLEAI_MAX_WORKDIR_MB must be a whole number of MB, not {text!r}") from None
    if value < 1:
        raise UsageError(f"SIMPLEAI_MAX_WORKDIR_MB must be 1 or more, not {value}")
    return value * MiB


def check_size(listing: Listing, cap: int) -> None:
    """Refuse a project over `cap` bytes, naming its biggest files (what to ignore or move to an input)."""
    if listing.size <= cap:
        return
    biggest = sorted(listing.files, key=lambda entry: (-entry.size, entry.path))[:BIGGEST_SHOWN]
    named = ", ".join(f"{entry.path} ({human(entry.size)})" for entry in biggest)
    raise UsageError(
        f"the project {listing.root} is {human(listing.size)}, over the {human(cap)} limit "
        f"(SIMPLEAI_MAX_WORKDIR_MB); the biggest files: {named}. Leave them out with a .simpleaiignore "
        f"line each, or pass data as --input NAME=PATH")


MANIFEST = b"simpleai-manifest-1\n"


def manifest_entry(kind: str, path: str, mode: int, size: int, target: str, digest: str) -> bytes:
    """One line of a project's manifest; nodeagent.projects writes the same from a tar's members."""
    return f"{kind}\0{path}\0{mode:o}\0{size}\0{target}\0{digest}\n".encode("utf-8", "surrogateescape")


def _manifest_entry(entry: Entry, digest: str) -> bytes:
    return manifest_entry(entry.kind, entry.path, _mode(entry), entry.size if entry.kind == "file" else 0, entry.target, digest)


def _mode(entry: Entry) -> int:
    return 0o777 if entry.kind == "link" else 0o755 if entry.kind == "dir" or entry.executable else 0o644


def project_sha256(listing: Listing, known: Mapping[str, str] | None = None) -> tuple[str, dict[str, str]]:
    """The project's address (the SHA-256 of its manifest) and every file's SHA-256; a file's
    from `known` (by path: what the caller knows of unchanged files), else read now."""
    manifest, digests = hashlib.sha256(MANIFEST), dict[str, str]()
    for entry in listing.entries:
        if entry.kind == "file":
            digests[entry.path] = (known or {}).get(entry.path) or _file_sha256(listing.root / entry.path)
        manifest.update(_manifest_entry(entry, digests.get(entry.path, "")))
    return manifest.hexdigest(), digests


def _file_sha256(path: Path) -> str:
    try:
        with open(path, "rb") as file:
            return hashlib.file_digest(file, "sha256").hexdigest()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from None


def pack_into(listing: Listing, sink: Sink, on_bytes: Callable[[int], None] | None = None) -> int:
    """Write the gzip'd tar into `sink` (closed here); the bytes written. A file whose size or
    stamp is not the listing's any more (it changed since its digest was taken, or while it was
    read) stops it: what was sent is then not the project the address names."""
    counted = _Counting(sink)
    zipped = _GzipMembers(counted)
    try:
        _write_tar(listing, zipped, on_bytes)
    finally:
        zipped.close()
    sink.close()
    return counted.written


def pack(listing: Listing, into: Path | None = None, on_bytes: Callable[[int], None] | None = None) -> Packed:
    """Write the listing's tarball to a temporary file (in `into`), under its address."""
    sha, _ = project_sha256(listing)
    descriptor, name = tempfile.mkstemp(prefix="simpleai-workdir-", suffix=".tar.gz", dir=into)
    try:
        compressed = pack_into(listing, os.fdopen(descriptor, "wb"), on_bytes)
    except BaseException:
        os.unlink(name)
        raise
    return Packed(Path(name), sha, len(listing.files), listing.size, compressed)


def _write_tar(listing: Listing, out: _GzipMembers, on_bytes: Callable[[int], None] | None) -> None:
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for entry in listing.entries:
            _add(tar, listing.root, entry, on_bytes)


def _add(tar: tarfile.TarFile, root: Path, entry: Entry, on_bytes: Callable[[int], None] | None) -> None:
    info = tarfile.TarInfo(entry.path)
    info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = 0, 0, 0, "", "", _mode(entry)
    if entry.kind == "dir":
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
        return
    if entry.kind == "link":
        info.type, info.linkname = tarfile.SYMTYPE, entry.target
        tar.addfile(info)
        return
    source = root / entry.path
    try:
        with open(source, "rb") as file:
            info.size = entry.size
            _unchanged(source, entry, os.fstat(file.fileno()))
            tar.addfile(info, file)
            # as git's index trusts it: a write since the listing changed the size, mtime or ctime
            _unchanged(source, entry, os.fstat(file.fileno()))
    except OSError as error:
        raise UsageError(f"cannot read {source}: {error.strerror}") from None
    if on_bytes:
        on_bytes(entry.size)


def _unchanged(source: Path, entry: Entry, found: os.stat_result) -> None:
    if (not stat.S_ISREG(found.st_mode) or found.st_size != entry.size
            or (found.st_ino, found.st_mtime_ns, found.st_ctime_ns) != entry.stamp):
        raise UsageError(f"{source} changed while it was being packed: run again")


MEMBER = 1024 * 1024  # tar bytes per gzip member
PROBE = 64 * 1024  # how much of a member is test-compressed to see whether it compresses
# the gzip header of every member: no name, time 0, no extra flags, OS "unknown" (the same bytes
# on every system, where zlib's own header would name the OS)
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


def gzip_member(data: bytes) -> bytes:
    """`data` as one gzip member: compressed (level 1: fast, and nearly as small for code) unless
    a probe of it shrinks by less than a tenth, then stored."""
    probe = data[:PROBE]
    level = 0 if len(zlib.compress(probe, 1)) > 0.9 * len(probe) else 1
    deflate = zlib.compressobj(level, zlib.DEFLATED, -15)
    body = deflate.compress(data) + deflate.flush()
    return GZIP_HEADER + body + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


class _GzipMembers(io.RawIOBase):
    """A write-only file that gzips what it is given, one member per MEMBER bytes, compressed on
    several threads (zlib lets go of the GIL) and written in order."""

    def __init__(self, file: Sink, workers: int | None = None) -> None:
        self.file, self.chunks, self.buffered = file, list[bytes](), 0
        self.workers = workers or min(8, os.cpu_count() or 2)
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="simpleai-gzip")
        self.pending: deque[Future[bytes]] = deque()

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.chunks.append(bytes(data))
        self.buffered += len(data)
        if self.buffered >= MEMBER:
            joined = b"".join(self.chunks)
            whole = len(joined) - len(joined) % MEMBER
            for start in range(0, whole, MEMBER):
                self._submit(joined[start:start + MEMBER])
            self.chunks, self.buffered = ([joined[whole:]] if whole < len(joined) else []), len(joined) - whole
        return len(data)

    def _submit(self, member: bytes) -> None:
        self.pending.append(self.pool.submit(gzip_member, member))
        while len(self.pending) > 2 * self.workers:  # bounded: memory stays a few MiB
            self.file.write(self.pending.popleft().result())

    def close(self) -> None:
        if not self.closed:
            try:
                if self.buffered:
                    self._submit(b"".join(self.chunks))
                    self.chunks, self.buffered = [], 0
                while self.pending:
                    self.file.write(self.pending.popleft().result())
            finally:
                self.pool.shutdown(cancel_futures=True)
        super().close()


class _Counting:
    """The sink, counting what it is given."""

    def __init__(self, file: Sink) -> None:
        self.file, self.written = file, 0

    def write(self, data: bytes, /) -> int:
        self.file.write(data)
        self.written += len(data)
        return len(data)

    def close(self) -> None:
        pass  # the caller's


def human(size: float) -> str:
    """Bytes as people read them: 812 B, 3.4 KB, 51.2 MB, 1.0 GB (powers of 1024)."""
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"  # pragma: no cover
