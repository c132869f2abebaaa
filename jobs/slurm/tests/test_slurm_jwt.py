"""The console mints slurmrestd's HS256 tokens itself when it knows the cluster's signing key."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

from jobs.slurm import jwt


def _part(token: str, index: int) -> dict:
    text = token.split(".")[index]
    return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def test_a_token_names_the_user_and_expires_after_its_lifespan():
    token = jwt.mint(b"key", "svc", lifespan=300, now=1000)
    assert _part(token, 0) == {"alg": "HS256", "typ": "JWT"}
    assert _part(token, 1) == {"exp": 1300, "iat": 1000, "sun": "svc"}
    assert jwt.expires_at(token) == 1300


def test_the_signature_is_hmac_sha256_of_header_and_claims_with_the_key():
    token = jwt.mint(b"key", "svc", now=1000)
    header, claims, signature = token.split(".")
    expected = hmac.new(b"key", f"{header}.{claims}".encode(), hashlib.sha256).digest()
    assert base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)) == expected


def test_a_token_that_is_not_one_has_no_expiry():
    assert jwt.expires_at("not-a-token") is None
