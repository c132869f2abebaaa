"""How every console process is started: daphne, the Celery worker and beat. One place, so
`make run`, the end-to-end tests and the benchmarks run the console the same way."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from nodeagent.protocol_checks import MAX_MESSAGE_BYTES

# what only the console's processes hold (also as NAME_FILE): node agents run strangers' jobs and
# never get them. The object storage reaches an agent from the console (S3_ENDPOINT_URL goes
# too: with it in its environment an agent would look for keys there as well)
CONSOLE_ONLY = frozenset({
    "DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "SECRET_KEY", "FIELD_ENCRYPTION_KEY",
    "S3_ENDPOINT_URL", "S3_ACCESS_KEY", "S3_SECRET_KEY",
})
# a fleet reconnecting at once (after a console restart) must not time out in the handshake
CONNECT_TIMEOUT_SECONDS = 30
# the queues a worker serves: the watchdog's own queue keeps node liveness and failover
# assessments from waiting behind other work (a worker may also serve it alone: -Q watchdog)
WORKER_QUEUES = "celery,watchdog"


def daphne_command(port: int | str, host: str = "127.0.0.1", python: str = sys.executable,
                   fd: int | None = None) -> list[str]:
    """The daphne command line: frames and messages up to the protocol's limit (an agent's
    largest batch is far below it; daphne's default 1 MiB would cut legitimate ones off).
    With `fd`, daphne serves an inherited listening socket instead: several processes share one
    port and the kernel hands each new connection to one of them (see `listening_socket`)."""
    bind = ["--fd", str(fd)] if fd is not None else ["-b", host, "-p", str(port)]
    return [
        python, "-m", "daphne", *bind,
        "--websocket-max-message-size", str(MAX_MESSAGE_BYTES), "--websocket-max-frame-size", str(MAX_MESSAGE_BYTES),
        "--websocket_connect_timeout", str(CONNECT_TIMEOUT_SECONDS),
        "console.serving:application",
    ]


def worker_command(log_level: str = "warning", concurrency: int = 4, python: str = sys.executable) -> list[str]:
    """A Celery worker on threads: its tasks wait on PostgreSQL and Redis, not on the CPU."""
    return [
        python, "-m", "celery", "-A", "console", "worker", "-P", "threads", "-c", str(concurrency), "-l", log_level,
        "-Q", WORKER_QUEUES, "--without-mingle", "--without-gossip",
    ]


def beat_command(schedule_file: Path, log_level: str = "warning", python: str = sys.executable) -> list[str]:
    return [python, "-m", "celery", "-A", "console", "beat", "-l", log_level, "-s", str(schedule_file)]


def listening_socket(port: int | str, host: str = "127.0.0.1") -> socket.socket:
    """A listening TCP socket that child processes inherit (daphne `--fd`): how several daphne
    processes serve one address without a proxy in front."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def console_commands(port: int | str, count: int = 1) -> tuple[list[tuple[str, list[str]]], socket.socket | None]:
    """The daphne processes of one console: one on the port, or `count` sharing an inherited
    listening socket (returned: pass its fd to each and close it once they started)."""
    if count == 1:
        return [("daphne", daphne_command(port))], None
    sock = listening_socket(port)
    return [(f"daphne-{i + 1}", daphne_command(port, fd=sock.fileno())) for i in range(count)], sock


def agent_environment(env: dict[str, str]) -> dict[str, str]:
    """`env` without what only the console's processes may hold (CONSOLE_ONLY, and NAME_FILE):
    the environment `make run` and the end-to-end tests start node agents with."""
    return {name: value for name, value in env.items() if name.removesuffix("_FILE") not in CONSOLE_ONLY}
