"""The user's own storage space (their bucket, their keys from GET /api/v1/account/storage/):
uploads of projects and inputs, content-addressed, and downloads of a job's results.

Layout in the bucket (what the console and the agents read):
    workdirs/<sha256>.tar.gz        a project (simpleai.packing); sha256 of the tarball's bytes
    inputs/<sha256>/<file name>     a local file given as an input; sha256 of its bytes
    inputs/<sha256>/<relative path> a local directory given as an input; sha256 of its manifest
                                    (each file's relative path, size and sha256, sorted)
What is already there is not sent again: a project or a file by its key, a directory file by file.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TextIO

from . import cache, packing
from .errors import SimpleAIError, UsageError
from .packing import human
from .s3lite import LightS3, MultipartUpload, S3Error

CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Space:
    """The caller's bucket and keys, as GET /api/v1/account/storage/ answers them."""

    endpoint_url: str
    bucket: str
    access_key: str
    secret_key: str

    @classmethod
    def from_api(cls, body: dict[str, Any]) -> Space:
        return cls(body["endpoint_url"], body["bucket"], body["access_key"], body["secret_key"])

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"


def parse_s3_url(url: str) -> tuple[str, str]:
    """`s3://bucket/key` → (bucket, key); the key may be empty or end with `/` (a prefix)."""
    if not url.startswith("s3://"):
        raise UsageError(f"{url!r} is not an s3:// URL")
    bucket, _, key = url[len("s3://"):].partition("/")
    if not bucket:
        raise UsageError(f"{url!r} names no bucket")
    return bucket, key


class Progress:
    """A progress bar on a terminal (`label [#####.....] 45% 23.1 MB/51.2 MB 12.3 MB/s`); on
    anything else nothing until the caller's summary. Safe to feed from boto3's threads."""

    WIDTH = 24

    def __init__(self, err: TextIO, label: str, total: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.err, self.label, self.total, self.clock = err, label, total, clock
        self.done, self.started, self.shown_at = 0, clock(), 0.0
        self.lock = threading.Lock()
        isatty = getattr(err, "isatty", None)
        self.live = bool(isatty and isatty())

    def add(self, count: int) -> None:
        with self.lock:
            self.done += count
            now = self.clock()
            if self.live and (now - self.shown_at >= 0.1 or self.done >= self.total):
                self.shown_at = now
                self.err.write("\r" + self.line(now))
                self.err.flush()

    def line(self, now: float) -> str:
        part = self.done / self.total if self.total else 1.0
        filled = int(part * self.WIDTH)
        rate = self.done / max(now - self.started, 1e-3)
        return (f"{self.label} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {part:4.0%} "
                f"{human(self.done)}/{human(self.total)} {human(rate)}/s")

    def finish(self) -> float:
        """Ends the bar's line; the seconds it took."""
        if self.live:
            self.err.write("\n")
            self.err.flush()
        return self.clock() - self.started


class Storage:
    """S3 calls in the caller's space with the caller's keys; every failure is one SimpleAIError line."""

    def __init__(self, space: Space, client: Any = None) -> None:
        self.space = space
        self._client = client
        self.light = LightS3(space.endpoint_url, space.access_key, space.secret_key)

    @property
    def client(self) -> Any:
        """boto3's S3 client, made on the first transfer: a run with nothing to send never imports it."""
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.client("s3", endpoint_url=self.space.endpoint_url, aws_access_key_id=self.space.access_key,
                                        aws_secret_access_key=self.space.secret_key, region_name="us-east-1",
                                        config=Config(retries={"max_attempts": 3, "mode": "standard"},
                                                      s3={"addressing_style": "path"}))
        return self._client

    # -- reading --------------------------------------------------------------------------------

    def exists(self, key: str) -> bool:
        """Whether the object `key` is in the caller's bucket (HEAD)."""
        try:
            return self.light.head(self.space.bucket, key)
        except S3Error as error:
            raise self._failure(f"look for {self.space.url(key)}", error) from None

    def sizes(self, prefix: str, bucket: str | None = None) -> dict[str, int]:
        """Every object under `prefix` with its size."""
        try:
            return self.light.list(bucket or self.space.bucket, prefix)
        except S3Error as error:
            raise self._failure(f"list s3://{bucket or self.space.bucket}/{prefix}", error) from None

    # -- writing --------------------------------------------------------------------------------

    def upload(self, path: Path, key: str, progress: Progress | None = None) -> None:
        try:
            self.client.upload_file(str(path), self.space.bucket, key, Callback=progress.add if progress else None)
        except Exception as error:
            raise self._failure(f"upload {path} to {self.space.url(key)}", error) from None

    def upload_workdir(self, listing: packing.Listing, sha256: str, err: TextIO) -> int:
        """Pack the project straight into its upload (no file on the laptop; compressing and
        sending at once); the bytes sent. A file that changed since its digest went into `sha256`
        (the address) stops it, and nothing stays."""
        key = packing.workdir_key(sha256)
        progress = Progress(err, "workdir", listing.size)
        upload = MultipartUpload(self.light, self.space.bucket, key)
        try:
            sent = packing.pack_into(listing, _Unclosed(upload), progress.add)  # UsageError: a file changed
            upload.close()
        except S3Error as error:
            upload.abort()
            raise self._failure(f"upload the project to {self.space.url(key)}", error) from None
        except BaseException:
            upload.abort()
            raise
        progress.finish()
        return sent

    def upload_input(self, path: Path, err: TextIO, dry_run: bool = False, env: Mapping[str, str] | None = None) -> Uploaded:
        """A local file or directory as an input: its s3:// URL, and what had to be sent (on a
        dry run: what would be, sending nothing). `env` locates the cache of SHA-256s
        (simpleai.cache): unchanged files are not read again to be hashed."""
        env = os.environ if env is None else env
        if path.is_file():
            return self._upload_file_input(path, err, dry_run, env)
        if path.is_dir():
            return self._upload_tree_input(path, err, dry_run, env)
        raise UsageError(f"{path} is neither a file nor a directory")

    def _upload_file_input(self, path: Path, err: TextIO, dry_run: bool, env: Mapping[str, str]) -> Uploaded:
        size, stamp = _stamp(path)
        fingerprint = _fingerprint("file", path.resolve(), [(path.name, size, stamp)])
        digest = cache.packed_sha256(env, fingerprint)
        if digest is None:
            digest, size = file_sha256(path)
            cache.remember(env, fingerprint, digest)
        key = f"inputs/{digest}/{path.name}"
        sent = 0 if self.exists(key) else 1
        if sent and not dry_run:
            progress = Progress(err, path.name, size)
            self.upload(path, key, progress)
            progress.finish()
        return Uploaded(self.space.url(key), 1, size, sent, size if sent else 0)

    def _upload_tree_input(self, root: Path, err: TextIO, dry_run: bool, env: Mapping[str, str]) -> Uploaded:
        stats = [(rel, *_stamp(root / rel)) for rel in sorted(_tree_files(root))]
        if not stats:
            raise UsageError(f"the input directory {root} has no files")
        fingerprint = _fingerprint("tree", root.resolve(), stats)
        digest = cache.packed_sha256(env, fingerprint)
        if digest is None:
            digest = manifest_sha256(tree_manifest(root, [rel for rel, _, _ in stats]))
            cache.remember(env, fingerprint, digest)
        prefix = f"inputs/{digest}/"
        there = self.sizes(prefix)
        missing = [(rel, size) for rel, size, _ in stats if there.get(prefix + rel) != size]
        total = sum(size for _, size, _ in stats)
        if missing and not dry_run:
            progress = Progress(err, root.name or str(root), sum(size for _, size in missing))
            for rel, _ in missing:
                self.upload(root / rel, prefix + rel, progress)
            progress.finish()
        return Uploaded(self.space.url(prefix), len(stats), total, len(missing), sum(size for _, size in missing))

    # -- results --------------------------------------------------------------------------------

    def download_prefix(self, url: str, to: Path, err: TextIO) -> tuple[int, int, float]:
        """Every object under the s3:// prefix `url` into `to`, by its path below the prefix:
        (files, bytes, seconds). Each file appears whole (written aside, then renamed)."""
        bucket, prefix = parse_s3_url(url)
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        objects = {key: size for key, size in self.sizes(prefix, bucket).items() if not key.endswith("/")}
        if not objects:
            return 0, 0, 0.0
        targets = [(key, size, _safe_target(to, key[len(prefix):], url)) for key, size in sorted(objects.items())]
        progress = Progress(err, "download", sum(objects.values()))
        for key, _, target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".simpleai-partial")
            try:
                self.client.download_file(bucket, key, str(partial), Callback=progress.add)
            except Exception as error:
                partial.unlink(missing_ok=True)
                raise self._failure(f"download s3://{bucket}/{key}", error) from None
            os.replace(partial, target)
        return len(objects), sum(objects.values()), progress.finish()

    def _failure(self, what: str, error: Exception) -> SimpleAIError:
        code = _code(error)
        if code in {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"}:
            return SimpleAIError(f"your storage refused to {what} ({code}): your keys may have been rotated, run again")
        if code:
            return SimpleAIError(f"could not {what}: {code}")
        return SimpleAIError(f"could not {what}: cannot reach your storage at {self.space.endpoint_url} ({error})")


class _Unclosed:
    """The upload as the packer's sink: its close (the end of the tar) must not complete the
    object before every file was found unchanged."""

    def __init__(self, upload: MultipartUpload) -> None:
        self.upload = upload

    def write(self, data: bytes, /) -> int:
        return self.upload.write(data)

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Uploaded:
    url: str
    files: int
    size: int
    sent_files: int
    sent_bytes: int


def _code(error: Exception) -> str:
    if isinstance(error, S3Error):
        return error.code
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code") or "")
    return ""


def _safe_target(to: Path, relative: str, url: str) -> Path:
    """Where an object goes below `to`; a key that would land outside it is refused."""
    parts = PurePosixPath(relative).parts
    if not parts or any(part in {"..", ""} for part in parts) or relative.startswith("/"):
        raise SimpleAIError(f"refusing to download {url}{relative}: its name leads out of {to}")
    return to.joinpath(*parts)


def file_sha256(path: Path) -> tuple[str, int]:
    hasher, size = hashlib.sha256(), 0
    try:
        with open(path, "rb") as file:
            while chunk := file.read(CHUNK):
                hasher.update(chunk)
                size += len(chunk)
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from None
    return hasher.hexdigest(), size


def _tree_files(root: Path) -> Iterator[str]:
    """Relative paths of the regular files under `root` (links followed, each directory once)."""
    seen: set[tuple[int, int]] = set()
    for directory, dirs, files in os.walk(root, followlinks=True):
        info = os.stat(directory)
        if (info.st_dev, info.st_ino) in seen:
            dirs[:] = []
            continue
        seen.add((info.st_dev, info.st_ino))
        for name in files:
            full = Path(directory) / name
            if full.is_file():
                yield full.relative_to(root).as_posix()


def tree_manifest(root: Path, files: list[str] | None = None) -> list[tuple[str, int, str]]:
    """(relative path, size, sha256) of every file under `root` (or of `files`), sorted by path."""
    manifest = []
    for rel in sorted(_tree_files(root)) if files is None else files:
        digest, size = file_sha256(root / rel)
        manifest.append((rel, size, digest))
    return manifest


def _stamp(path: Path) -> tuple[int, tuple[int, int, int]]:
    """A file's size, and what changes when it is written: (inode, mtime_ns, ctime_ns)."""
    try:
        info = path.stat()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from None
    return info.st_size, (info.st_ino, info.st_mtime_ns, info.st_ctime_ns)


def _fingerprint(kind: str, where: Path, stats: list[tuple[str, int, tuple[int, int, int]]]) -> str:
    """What an input's SHA-256 depends on, cheaply (as simpleai.packing.fingerprint for a project)."""
    hasher = hashlib.sha256(f"simpleai-input-1\0{kind}\0{where}\0".encode("utf-8", "surrogateescape"))
    for rel, size, stamp in stats:
        hasher.update(f"{rel}\0{size}\0{stamp}\n".encode("utf-8", "surrogateescape"))
    return hasher.hexdigest()


def manifest_sha256(manifest: list[tuple[str, int, str]]) -> str:
    text = "".join(f"{rel}\t{size}\t{digest}\n" for rel, size, digest in manifest)
    return hashlib.sha256(text.encode()).hexdigest()
