"""Signed manifests: an HMAC-SHA256 over MANIFEST.json's canonical bytes, with the job's key.

The platform gives every attempt of a job the same key (`CHECKPOINT_SIGNING_KEY`, hex) and no
other job has it, so a manifest that verifies was written by this job, and the SHA-256 of every
file it lists says which bytes that job wrote. A checkpoint planted under the job's prefix by
anyone else is refused.

Standard library only, and no import of this package: the node agent (which has no torch) loads
this file by its path to check manifests with the very same code the training process signs them
with.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

ENV_KEY = "CHECKPOINT_SIGNING_KEY"
SIGNATURE = "signature"  # the manifest's field that holds the MAC; it is not part of what is signed
ALGORITHM = "HMAC-SHA256"


class UntrustedManifest(ValueError):
    """A manifest that is unreadable, unsigned, signed with another key, or for another step."""


def parse_key(text: str | None) -> bytes | None:
    """The key from its hex form (None or empty: no key). Bad hex raises ValueError."""
    if text is None or not text.strip():
        return None
    try:
        key = bytes.fromhex(text.strip())
    except ValueError as exc:
        raise ValueError(f"{ENV_KEY} is not a hex string") from exc
    if len(key) < 16:
        raise ValueError(f"{ENV_KEY} is {len(key)} bytes; a signing key has at least 16")
    return key


def canonical_bytes(manifest: Mapping[str, Any]) -> bytes:
    """What the MAC covers: the manifest without its signature, as sorted, compact ASCII JSON.

    The signer passes the manifest through JSON first (`sign` does), so that what it signs is
    exactly what a reader parses back (tuples become lists, integer keys become strings)."""
    body = {k: v for k, v in manifest.items() if k != SIGNATURE}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def mac(manifest: Mapping[str, Any], key: bytes) -> str:
    return hmac.new(key, canonical_bytes(manifest), hashlib.sha256).hexdigest()


def sign(manifest: Mapping[str, Any], key: bytes) -> dict[str, Any]:
    """A copy of the manifest (as JSON would give it back) with its signature added."""
    body: dict[str, Any] = json.loads(json.dumps({k: v for k, v in manifest.items() if k != SIGNATURE}))
    body[SIGNATURE] = {"algorithm": ALGORITHM, "mac": mac(body, key)}
    return body


def check(data: bytes, key: bytes | None, step: int | None = None) -> dict[str, Any]:
    """The parsed manifest, if it may be trusted; UntrustedManifest (with the reason) otherwise.

    With a key the manifest must carry a valid signature; without one (a run outside the platform)
    anything readable passes. `step`: the step its directory or key names, which it must state."""
    try:
        manifest = json.loads(data)
    except ValueError as exc:
        raise UntrustedManifest(f"unreadable manifest: {exc}") from exc
    if not isinstance(manifest, dict):
        raise UntrustedManifest("unreadable manifest: not a JSON object")
    if key is not None:
        signature = manifest.get(SIGNATURE)
        if not isinstance(signature, dict) or not signature.get("mac"):
            raise UntrustedManifest("the manifest is not signed (not written by this job)")
        if signature.get("algorithm") != ALGORITHM:
            raise UntrustedManifest(f"unknown signature algorithm {signature.get('algorithm')!r}")
        if not hmac.compare_digest(str(signature["mac"]), mac(manifest, key)):
            raise UntrustedManifest("the signature does not verify with this job's key "
                                    "(written by another job, or altered)")
    if step is not None and manifest.get("step") != step:
        raise UntrustedManifest(f"the manifest is for step {manifest.get('step')!r}, not {step}")
    return manifest
