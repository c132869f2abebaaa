"""Slurm's JWT (auth/jwt): HS256 tokens `{"sun": user, "iat": …, "exp": …}` for slurmrestd.

With the cluster's signing key (AuthAltParameters=jwt_key=…) the console mints a short-lived
token for its service user per use, as `scontrol token` would; without the key it uses the
token staff pasted into the admin, which expires when its lifespan ends.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint(key: bytes, user: str, lifespan: int = 600, now: float | None = None) -> str:
    issued = int(time.time() if now is None else now)
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = _b64(json.dumps({"exp": issued + lifespan, "iat": issued, "sun": user}, separators=(",", ":")).encode())
    signature = hmac.new(key, f"{header}.{claims}".encode(), hashlib.sha256).digest()
    return f"{header}.{claims}.{_b64(signature)}"


def expires_at(token: str) -> int | None:
    """The `exp` claim of a token (unverified: only to warn staff before it runs out)."""
    try:
        claims = token.split(".")[1]
        return int(json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))["exp"])
    except (IndexError, ValueError, KeyError, TypeError):
        return None
