"""Which checkpoint steps of a placement the agent may report: those its own job signed.

A job's MANIFEST.json carries an HMAC with the job's key, which the console puts into every
attempt's environment as CHECKPOINT_SIGNING_KEY; a manifest someone else planted under the
job's prefix does not verify, and the console never hears of its step. The check is the
checkpoint library's own (nodeagent/vendor/concurrent_checkpoint/signing.py, standard library
only), loaded from its file: one implementation, and the library's package (which imports
torch) is never imported by the agent.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, cast

from .environment import VENDOR_DIR
from .storage import Storage, parse_s3_url

log = logging.getLogger(__name__)
SIGNING_MODULE = VENDOR_DIR / "concurrent_checkpoint" / "signing.py"
MAX_MANIFEST_BYTES = 64 << 20  # a manifest lists files; one this large is not ours to parse
_MANIFEST_KEY = re.compile(r"(?:^|/)step-(\d+)/MANIFEST\.json$")


class _Signing(Protocol):
    ENV_KEY: str
    UntrustedManifest: type[Exception]

    def parse_key(self, text: str | None) -> bytes | None: ...

    def check(self, data: bytes, key: bytes | None, step: int | None = None) -> dict[str, Any]: ...

    def sign(self, manifest: dict[str, Any], key: bytes) -> dict[str, Any]: ...


def _load(path: Path) -> _Signing:
    spec = importlib.util.spec_from_file_location("simpleai_checkpoint_signing", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the checkpoint signing module from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return cast(_Signing, module)


signing = _load(SIGNING_MODULE)


def listed_manifests(storage: Storage, url: str) -> dict[int, str]:
    """step -> ETag of every `step-N/MANIFEST.json` directly under the checkpoint URL."""
    bucket, prefix = parse_s3_url(url.rstrip("/") + "/")
    listed: dict[int, str] = {}
    paginator = storage.client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            match = _MANIFEST_KEY.search(item["Key"])
            if match and item["Key"] == f"{prefix}step-{match.group(1)}/MANIFEST.json":
                listed[int(match.group(1))] = str(item.get("ETag", ""))
    return listed


class TrustedSteps:
    """The steps whose manifest verifies with the placement's key; each manifest version (ETag)
    is fetched and checked once, and its verdict (either way) remembered."""

    def __init__(self) -> None:
        # (url, step) -> (ETag, key fingerprint, trusted)
        self._verdicts: dict[tuple[str, int], tuple[str, str, bool]] = {}
        self._bad_keys: set[str] = set()

    def steps(self, storage: Storage, url: str, env: Mapping[str, str]) -> list[int]:
        """Trusted complete steps, oldest first. A placement without a key (a console that does
        not sign yet) gets every complete step, as before signing existed."""
        listed = listed_manifests(storage, url)
        try:
            key = signing.parse_key(env.get(signing.ENV_KEY))
        except ValueError as exc:
            if url not in self._bad_keys:
                self._bad_keys.add(url)
                log.error("checkpoints under %s are not reported: %s", url, exc)
            return []
        if key is None:
            return sorted(listed)
        fingerprint = hashlib.sha256(key).hexdigest()[:16]
        for cached in [c for c in self._verdicts if c[0] == url and c[1] not in listed]:
            del self._verdicts[cached]
        trusted = []
        for step, etag in listed.items():
            known = self._verdicts.get((url, step))
            if known is None or not etag or known[:2] != (etag, fingerprint):
                known = (etag, fingerprint, self._verify(storage, url, step, key))
                self._verdicts[(url, step)] = known
            if known[2]:
                trusted.append(step)
        return sorted(trusted)

    def forget(self, urls: set[str]) -> None:
        """Drop what is remembered of checkpoint URLs no placement uses any more."""
        self._verdicts = {k: v for k, v in self._verdicts.items() if k[0] in urls}
        self._bad_keys &= urls

    def _verify(self, storage: Storage, url: str, step: int, key: bytes) -> bool:
        bucket, prefix = parse_s3_url(f"{url.rstrip('/')}/step-{step}/MANIFEST.json")
        response = storage.client.get_object(Bucket=bucket, Key=prefix)
        if int(response.get("ContentLength") or 0) > MAX_MANIFEST_BYTES:
            log.warning("checkpoint step %d under %s is not reported: its manifest is %s bytes",
                        step, url, response.get("ContentLength"))
            return False
        try:
            signing.check(response["Body"].read(), key, step)
        except signing.UntrustedManifest as exc:
            log.warning("checkpoint step %d under %s is not reported: %s", step, url, exc)
            return False
        return True
