"""Secrets of `make run`'s private services (PostgreSQL's and Redis's passwords, SeaweedFS's
signing keys): random, made once, kept in a file only its owner reads (0600), reused by every
later run. Jobs run as other Unix users (nodeagent.jobusers): they cannot read these files, nor a
console process's environment, which is where the credentials go from here."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit


def stored_secret(path: Path, nbytes: int = 32) -> str:
    """The secret kept in `path`, created the first time (URL-safe: it goes into URLs as is)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)  # a copy an operator put there with looser permissions
        secret = path.read_text().strip()
        if not secret:
            raise RuntimeError(f"{path} is empty: delete it to have a new secret made") from None
        return secret
    with os.fdopen(fd, "w") as out:
        secret = secrets.token_urlsafe(nbytes)
        out.write(secret + "\n")
    return secret


def with_password(url: str, password: str, user: str = "") -> str:
    """`url` with `password` (and `user`, if given) in its authority."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    name = quote(user or parts.username or "", safe="")
    return urlunsplit(parts._replace(netloc=f"{name}:{quote(password, safe='')}@{host}"))


def redacted(url: str) -> str:
    """`url` fit to print: its password replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user, host = parts.netloc.rpartition("@")[0].partition(":")[0], parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
