"""Object storage (any S3 endpoint, boto3): the training script in, OUTPUT_DIR out.

Blocking boto3 calls; the runner calls them through `asyncio.to_thread`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .protocol import ObjectStorage


class StorageError(Exception):
    """A transfer failed; the message is written into the job's log stream as is."""


@dataclass(frozen=True)
class S3Settings:
    endpoint_url: str
    access_key: str
    secret_key: str


def resolve_settings(environ: Mapping[str, str], welcome: ObjectStorage | None) -> S3Settings | None:
    """The agent's own environment wins (an operator may route a node through another endpoint);
    otherwise what the console sent in `welcome`."""
    if environ.get("S3_ENDPOINT_URL"):
        return S3Settings(environ["S3_ENDPOINT_URL"], environ.get("S3_ACCESS_KEY", ""), environ.get("S3_SECRET_KEY", ""))
    if welcome and welcome.get("endpoint_url"):
        return S3Settings(welcome["endpoint_url"], welcome.get("access_key", ""), welcome.get("secret_key", ""))
    return None


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

    def upload_tree(self, directory: Path, prefix_url: str) -> int:
        """Upload every file under `directory` to `prefix_url/<relative path>`; returns the count."""
        bucket, prefix = parse_s3_url(prefix_url)
        prefix = prefix.strip("/")
        count = 0
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            relative = path.relative_to(directory).as_posix()
            key = f"{prefix}/{relative}" if prefix else relative
            try:
                self.client.upload_file(str(path), bucket, key)
            except Exception as exc:
                raise StorageError(f"Could not upload {relative} to s3://{bucket}/{key}: {_describe(exc)}") from exc
            count += 1
        return count


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
