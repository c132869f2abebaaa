"""How every console process is started: daphne, the Celery worker and beat. One place, so
`make run`, the end-to-end tests and the benchmarks run the console the same way."""

from __future__ import annotations

import sys
from pathlib import Path

from nodeagent.protocol_checks import MAX_MESSAGE_BYTES

# a fleet reconnecting at once (after a console restart) must not time out in the handshake
CONNECT_TIMEOUT_SECONDS = 30
# the queues a worker serves: the watchdog's own queue keeps node liveness and failover
# assessments from waiting behind other work (a worker may also serve it alone: -Q watchdog)
WORKER_QUEUES = "celery,watchdog"


def daphne_command(port: int | str, host: str = "127.0.0.1", python: str = sys.executable) -> list[str]:
    """The daphne command line: frames and messages up to the protocol's limit (an agent's
    largest batch is far below it; daphne's default 1 MiB would cut legitimate ones off)."""
    return [
        python, "-m", "daphne", "-b", host, "-p", str(port),
        "--websocket-max-message-size", str(MAX_MESSAGE_BYTES), "--websocket-max-frame-size", str(MAX_MESSAGE_BYTES),
        "--websocket_connect_timeout", str(CONNECT_TIMEOUT_SECONDS),
        "console.asgi:application",
    ]


def worker_command(log_level: str = "warning", concurrency: int = 4, python: str = sys.executable) -> list[str]:
    """A Celery worker on threads: its tasks wait on PostgreSQL and Redis, not on the CPU."""
    return [
        python, "-m", "celery", "-A", "console", "worker", "-P", "threads", "-c", str(concurrency), "-l", log_level,
        "-Q", WORKER_QUEUES, "--without-mingle", "--without-gossip",
    ]


def beat_command(schedule_file: Path, log_level: str = "warning", python: str = sys.executable) -> list[str]:
    return [python, "-m", "celery", "-A", "console", "beat", "-l", log_level, "-s", str(schedule_file)]
