"""Object storage (any S3 endpoint, boto3): the training script in, OUTPUT_DIR out.

Blocking boto3 calls; the runner calls them through `asyncio.to_thread`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from .protocol import Placement


class StorageError(Exception):
    """A transfer failed; the message is written into the job's log stream as is."""


@dataclass(frozen=True)
class S3Settings:
    endpoint_url: str
    access_key: str
    secret_key: str


# what the agent's own S3_ENDPOINT_URL replaces in a placement's environment (routing)
ENDPOINT_VARIABLES = ("S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


def resolve_settings(environ: Mapping[str, str], placement: Placement) -> S3Settings | None:
    """The placement's own credentials (its attempt's, minted by the console for it alone); None
    when it has none (the console has no object storage). The node holds no keys of its own:
    the agent's S3_ENDPOINT_URL may route the placement's transfers through another endpoint,
    never with other keys."""
    storage = placement.get("storage")
    if not storage or not storage.get("access_key"):
        return None
    endpoint = environ.get("S3_ENDPOINT_URL") or storage["endpoint_url"]
    return S3Settings(endpoint, storage["access_key"], storage["secret_key"])


def routed_environment(env: dict[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """The command reaches object storage the way the agent does: the agent's S3_ENDPOINT_URL,
    when it has one, replaces the console's endpoint in the placement's environment."""
    endpoint = environ.get("S3_ENDPOINT_URL")
    if endpoint:
        for name in ENDPOINT_VARIABLES:
            if name in env:
                env[name] = endpoint
    return env


def parse_s3_url(url: str) -> tuple[str, str]:
    """`s3://bucket/key/...` → (bucket, key); the key may be empty (a bucket-wide prefix)."""
    if not url.startswith("s3://"):
        raise StorageError(f"not an s3:// URL: {url!r}")
    bucket, _, key = url[len("s3://"):].partition("/")
    if not bucket:
        raise StorageError(f"no bucket in {url!r}")
    return bucket, key


class Storage:
    def __init__(self, settings: S3Settings, client: Any = None) -> None:
        if client is None:
            import boto3  # imported here: the agent starts (and its CLI answers) without paying for boto3

            client = boto3.client(
                "s3", endpoint_url=settings.endpoint_url, aws_access_key_id=settings.access_key,
                aws_secret_access_key=settings.secret_key, region_name="us-east-1",
            )
        self.client = client

    def download(self, url: str, directory: Path) -> tuple[Path, int]:
        """Fetch `url` into `directory`, keeping its file name; returns (path, bytes)."""
        bucket, key = parse_s3_url(url)
        name = key.rsplit("/", 1)[-1]
        if not name:
            raise StorageError(f"{url} names no file")
        target = directory / name
        try:
            self.client.download_file(bucket, key, str(target))
        except Exception as exc:  # botocore ClientError (404/403), EndpointConnectionError, ...
            target.unlink(missing_ok=True)
            raise StorageError(f"Could not download the training script {url}: {_describe(exc)}") from exc
        return target, target.stat().st_size

    def upload_tree(self, directory: Path, prefix_url: str) -> Uploaded:
        """Upload every regular file under `directory` to `prefix_url/<relative path>`.

        The directory is the job's: a symbolic link in it may name any file of the node (the
        token, another tenant's share) and the agent reads as root, so links are never followed,
        and each file is opened relative to its directory's descriptor (a directory swapped for a
        link meanwhile leads nowhere)."""
        bucket, prefix = parse_s3_url(prefix_url)
        prefix = prefix.strip("/")
        files = left_out = 0
        for relative, handle in _regular_files(directory):
            key = f"{prefix}/{relative}" if prefix else relative
            if handle is None:
                left_out += 1
                continue
            try:
                with handle:
                    self.client.upload_fileobj(handle, bucket, key)
            except Exception as exc:
                raise StorageError(f"Could not upload {relative} to s3://{bucket}/{key}: {_describe(exc)}") from exc
            files += 1
        return Uploaded(files, left_out)


@dataclass(frozen=True)
class Uploaded:
    files: int
    left_out: int  # symbolic links, devices, pipes: never followed nor uploaded

    def describe(self) -> str:
        text = f"{self.files} file{'' if self.files == 1 else 's'}"
        if self.left_out:
            text += f"; {self.left_out} link{'' if self.left_out == 1 else 's'} or special file{'' if self.left_out == 1 else 's'} left out"
        return text


def has_regular_files(directory: Path) -> bool:
    for _, handle in _regular_files(directory):
        if handle is not None:
            handle.close()
            return True
    return False


def _regular_files(directory: Path) -> Iterator[tuple[str, BinaryIO | None]]:
    """(relative path, an open file) for each regular file under `directory`, sorted; (relative
    path, None) for each entry that is neither a file nor a directory (links included)."""
    for root, dirs, names, root_fd in os.fwalk(directory, follow_symlinks=False):
        dirs.sort()
        base = Path(root).relative_to(directory)
        for name in sorted(names + [d for d in dirs if stat.S_ISLNK(os.stat(d, dir_fd=root_fd, follow_symlinks=False).st_mode)]):
            relative = (base / name).as_posix()
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=root_fd)
            except OSError:  # a link (ELOOP), or gone meanwhile
                yield relative, None
                continue
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a fifo or a device: never read
                os.close(fd)
                yield relative, None
                continue
            os.set_blocking(fd, True)
            yield relative, os.fdopen(fd, "rb")


def _describe(exc: Exception) -> str:
    # botocore's ClientError carries the S3 code ("404", "NoSuchBucket", "AccessDenied")
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error", {})
        code, message = error.get("Code", ""), error.get("Message", "")
        if code in ("404", "NoSuchKey"):
            return "no such object"
        if code == "NoSuchBucket":
            return "no such bucket"
        if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            return f"access denied ({code})"
        return f"{code} {message}".strip() or str(exc)
    return str(exc) or type(exc).__name__


def describe_error(exc: Exception) -> str:
    """A transfer error in a few words (no such object, access denied, the endpoint's message)."""
    return _describe(exc)
