"""Symmetric encryption for secrets stored in the database (registry passwords)."""

from __future__ import annotations

import base64
import hashlib
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


@lru_cache(maxsize=4)
def _fernet(key: str, secret_key: str) -> Fernet:
    if key:
        return Fernet(key.encode())
    # zero-setup default: a Fernet key derived from SECRET_KEY (documented in docs/operator/configuration.md)
    digest = hashlib.sha256(b"simpleai-field-encryption:" + secret_key.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def encrypt(plaintext: str) -> str:
    if not plaintext:
        return ""
    return _fernet(settings.FIELD_ENCRYPTION_KEY, settings.SECRET_KEY).encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    """The plaintext of `token`; raises ValueError when the key changed or the data is corrupt."""
    if not token:
        return ""
    try:
        return _fernet(settings.FIELD_ENCRYPTION_KEY, settings.SECRET_KEY).decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise ValueError("the stored secret cannot be decrypted with the configured key") from exc
