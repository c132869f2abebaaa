"""Typed readers for settings that come from the environment; bad values fail loudly."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_secret(name: str, default: str = "") -> str:
    """A secret from NAME, or from the file named by NAME_FILE (Docker/K8s secrets)."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={path} cannot be read: {exc}") from exc
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no)")


def env_int(name: str, default: int, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below the minimum {minimum}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def private_database_url(base_dir: Path) -> str:
    """Where `make run`'s private PostgreSQL listens (console.services.postgres_server), with its
    password when this user may read it (`manage.py` run by hand beside `make run`)."""
    run = base_dir / ".run" / "postgres"
    try:
        password = (run / "password").read_text().strip()
    except OSError:
        password = ""
    auth = f"postgres:{quote(password, safe='')}" if password else "postgres"
    return f"postgres://{auth}@/simpleai?host={run / 'socket'}&port=5432"


def database_from_url(url: str, base_dir: Path) -> dict[str, Any]:
    """DATABASES['default'] from postgres://user:pass@host:port/name (libpq's `?host=/socket/dir`
    and `?port=` work too). Unset: `make run`'s private PostgreSQL."""
    parsed = urlparse(url or private_database_url(base_dir))
    if parsed.scheme == "sqlite":
        raise ImproperlyConfigured(
            "DATABASE_URL: SQLite is not supported (it cannot take the console's concurrent writers); "
            "use PostgreSQL — `make run` starts a private one when DATABASE_URL is unset"
        )
    if parsed.scheme not in {"postgres", "postgresql", "pgsql"}:
        raise ImproperlyConfigured(f"DATABASE_URL scheme {parsed.scheme!r} is not supported (postgres)")
    if not parsed.path.strip("/"):
        raise ImproperlyConfigured(f"DATABASE_URL {url!r} names no database")
    query = parse_qs(parsed.query)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")),
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": query.get("host", [parsed.hostname or ""])[0],
        "PORT": query.get("port", [str(parsed.port or "")])[0],
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
    }
