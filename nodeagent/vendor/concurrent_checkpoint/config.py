"""Engine settings: explicit arguments win, then the environment, then defaults.

Environment variables are read through typed helpers that fail loudly on bad values, so a typo in
a job's environment stops the job at start-up instead of silently disabling checkpoints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import urlparse

from . import signing

ENV_S3_URL = "CHECKPOINT_S3_URL"
ENV_S3_ENDPOINT = "S3_ENDPOINT_URL"
ENV_S3_ACCESS_KEY = "S3_ACCESS_KEY"
ENV_S3_SECRET_KEY = "S3_SECRET_KEY"
ENV_S3_REGION = "S3_REGION"
ENV_KEEP_LAST = "CHECKPOINT_KEEP_LAST"
ENV_HOST_CACHE_GB = "CHECKPOINT_HOST_CACHE_GB"
ENV_PARSER_THREADS = "CHECKPOINT_PARSER_THREADS"
ENV_SIGNING_KEY = signing.ENV_KEY

GIB = 1 << 30


class ConfigError(ValueError):
    """A checkpointing setting (argument or environment variable) has a bad value."""


def env_str(name: str) -> str | None:
    """The variable's value, or the content of the file named by `<name>_FILE` (for secrets)."""
    value = os.environ.get(name)
    if value:
        return value
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read().strip() or None
        except OSError as exc:
            raise ConfigError(f"{name}_FILE={path!r} cannot be read: {exc}") from exc
    return None


def env_int(name: str, minimum: int | None = None) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not an integer") from exc
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value} must be at least {minimum}")
    return value


def env_float(name: str) -> float | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not a number") from exc


@dataclass(frozen=True)
class S3Config:
    """Where complete checkpoints are mirrored: `s3://bucket/prefix` plus endpoint and keys."""

    bucket: str
    prefix: str
    endpoint_url: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    region: str = "us-east-1"

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> S3Config:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ConfigError(f"S3 URL {url!r} must look like s3://bucket/prefix")
        return cls(bucket=parsed.netloc, prefix=parsed.path.strip("/"), **kwargs)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)


@dataclass(frozen=True)
class CheckpointConfig:
    """Every knob of the engine. Build it with `CheckpointConfig.resolve(...)`."""

    host_cache_size: float = 2.0  # GB; the one host buffer, allocated at the first save
    parser_threads: int = 2  # background writer threads
    pin_host_cache: bool = True  # page-locked host cache when CUDA is present
    keep_last: int = 3  # complete checkpoints kept (locally and in S3)
    lazy: bool | None = None  # None: lazy device-to-host copies when CUDA is available
    fsync: bool = True  # durability; off only for throw-away runs
    verify: bool = True  # check file hashes when loading (always, whatever this says, with a signing key)
    direct_io: bool = True  # O_DIRECT writes where the filesystem allows: no page-cache copy, little CPU
    background_nice: int = 10  # writer threads this many nice levels below training (0: same)
    piece_mb: int = 64  # largest write unit; smaller pieces let copy and write overlap
    commit_timeout: float = 900.0  # seconds rank 0 waits for the other ranks' shards
    rank: int | None = None  # None: torch.distributed, then RANK
    world_size: int | None = None  # None: torch.distributed, then WORLD_SIZE
    s3: S3Config | None = None
    # the job's key (CHECKPOINT_SIGNING_KEY, hex, set by the platform): manifests are signed with
    # it and only manifests that verify with it are loaded; None: unsigned, everything complete loads
    signing_key: bytes | None = field(default=None, repr=False)

    @classmethod
    def resolve(cls, **kwargs: Any) -> CheckpointConfig:
        """Fill what the arguments leave out (None) from the environment; validate the result."""
        known = {f.name for f in fields(cls)} | {"s3_url", "s3_endpoint_url", "s3_access_key",
                                                 "s3_secret_key", "s3_region"}
        unknown = set(kwargs) - known
        if unknown:
            raise ConfigError(f"unknown checkpoint setting(s) {sorted(unknown)}; known: {sorted(known)}")
        s3_keys = {k: kwargs.pop(k) for k in list(kwargs) if k.startswith("s3_")}
        given = {k: v for k, v in kwargs.items() if v is not None}
        from_env = {
            "keep_last": env_int(ENV_KEEP_LAST, minimum=1),
            "host_cache_size": env_float(ENV_HOST_CACHE_GB),
            "parser_threads": env_int(ENV_PARSER_THREADS, minimum=1),
        }
        merged = {k: v for k, v in from_env.items() if v is not None} | given
        merged["signing_key"] = _signing_key(merged.get("signing_key"))
        if "s3" not in merged:
            merged["s3"] = _s3_from(s3_keys)
        config = cls(**merged)
        config.validate()
        return config

    def with_overrides(self, **kwargs: Any) -> CheckpointConfig:
        if kwargs.get("signing_key") is not None:
            kwargs["signing_key"] = _signing_key(kwargs["signing_key"])
        config = replace(self, **kwargs)
        config.validate()
        return config

    def validate(self) -> None:
        if not self.host_cache_size > 0:
            raise ConfigError(f"host_cache_size must be > 0 GB, got {self.host_cache_size}")
        if self.parser_threads < 1:
            raise ConfigError(f"parser_threads must be >= 1, got {self.parser_threads}")
        if self.keep_last < 1:
            raise ConfigError(f"keep_last must be >= 1, got {self.keep_last}")
        if not 0 <= self.background_nice <= 19:
            raise ConfigError(f"background_nice must be 0..19, got {self.background_nice}")
        if self.piece_mb < 1:
            raise ConfigError(f"piece_mb must be >= 1, got {self.piece_mb}")

    @property
    def host_cache_bytes(self) -> int:
        return int(self.host_cache_size * GIB)


def _signing_key(given: str | bytes | None) -> bytes | None:
    """An explicit key (bytes, or hex) wins; then CHECKPOINT_SIGNING_KEY (or its _FILE)."""
    if isinstance(given, bytes):
        return given
    try:
        return signing.parse_key(given if given is not None else env_str(ENV_SIGNING_KEY))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def _s3_from(args: dict[str, Any]) -> S3Config | None:
    url = args.get("s3_url") or env_str(ENV_S3_URL)
    if not url:
        return None
    return S3Config.from_url(
        url,
        endpoint_url=args.get("s3_endpoint_url") or env_str(ENV_S3_ENDPOINT),
        access_key=args.get("s3_access_key") or env_str(ENV_S3_ACCESS_KEY),
        secret_key=args.get("s3_secret_key") or env_str(ENV_S3_SECRET_KEY),
        region=args.get("s3_region") or env_str(ENV_S3_REGION) or "us-east-1",
    )
