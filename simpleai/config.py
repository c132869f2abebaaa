"""Which console and token: SIMPLEAI_URL and SIMPLEAI_TOKEN, else the file `simpleai login` wrote.

The file is $XDG_CONFIG_HOME/simpleai/config (~/.config/simpleai/config when that is unset),
mode 0600 as it holds the token. Each variable of the environment wins over the file's value.
"""

from __future__ import annotations

import configparser
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import SimpleAIError, UsageError
from .transport import missing_token

SECTION = "console"


@dataclass(frozen=True)
class Config:
    url: str
    token: str


def config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "simpleai" / "config"


def normalise_url(url: str) -> str:
    """The console's base URL without a trailing slash; a scheme is required (http or https)."""
    url = url.strip().rstrip("/")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise UsageError(f"{url or 'the URL'} is not a console address: give it as https://console.example.com")
    return url


def read_file(path: Path) -> dict[str, str]:
    parser = configparser.RawConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except configparser.Error as error:
        raise SimpleAIError(f"{path} is not a simpleai config file ({error.message}): run `simpleai login URL` again") from None
    return dict(parser[SECTION]) if parser.has_section(SECTION) else {}


def load(env: Mapping[str, str] | None = None, path: Path | None = None) -> Config:
    """The console and token to use; raises when there is no console, or no token for it."""
    env = os.environ if env is None else env
    stored = read_file(path or config_path(env))
    url = env.get("SIMPLEAI_URL") or stored.get("url", "")
    token = env.get("SIMPLEAI_TOKEN") or stored.get("token", "")
    if not url:
        raise SimpleAIError("no console: run `simpleai login URL`, or set SIMPLEAI_URL and SIMPLEAI_TOKEN")
    url = normalise_url(url)
    if not token:
        raise missing_token(url)
    return Config(url, token.strip())


def save(config: Config, path: Path) -> Path:
    """Write the file readable by its owner only (also when it existed with wider permissions)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    parser = configparser.RawConfigParser()
    parser[SECTION] = {"url": config.url, "token": config.token}
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        parser.write(file)
    return path
