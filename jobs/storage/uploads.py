"""Uploads through the console (the account page's form): into the user's own space, with the
user's own keys, under `uploads/`. Plain rules here; the view streams the file."""

from __future__ import annotations

import posixpath
import re

UPLOAD_PREFIX = "uploads/"
_SAFE = re.compile(r"[A-Za-z0-9._\-/ ]+")


def upload_key(name: str, file_name: str) -> tuple[str, str]:
    """(object key, "") for the key the user typed (or the file's own name), or ("", why not).
    Always under uploads/; no '..', no absolute paths, no empty segments."""
    wanted = (name or "").strip().lstrip("/") or posixpath.basename((file_name or "").replace("\\", "/"))
    if wanted.startswith(UPLOAD_PREFIX):
        wanted = wanted[len(UPLOAD_PREFIX):]
    if not wanted or wanted.endswith("/"):
        return "", "Name the object (e.g. train.py or experiments/train.py)."
    if len(wanted) > 512 or not _SAFE.fullmatch(wanted):
        return "", "Use letters, digits, '.', '_', '-', ' ' and '/' only (at most 512 characters)."
    if posixpath.normpath(wanted) != wanted or wanted.startswith("../") or "/../" in f"/{wanted}/":
        return "", "Use a plain relative path without '..' or '//'."
    return UPLOAD_PREFIX + wanted, ""
