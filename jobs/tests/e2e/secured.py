"""A console on services like `make run`'s: a private PostgreSQL and Redis that require passwords.

The suite's own PostgreSQL and Redis (127.0.0.1, trust, no password: CI's) are reachable by any
process on the machine, a job's included. A test of what a hostile job can reach runs the console
on these instead (`secured_services`, `secured_stack` in conftest.py): the same code as `make run`
(console.services), a database socket in a directory only PostgreSQL's user may enter, and the
passwords only in the console processes' environment. The test process reaches them with
`sql` and `manage`, not the ORM (which stays on the suite's test database).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from console.services.credentials import stored_secret
from console.services.postgres_server import start_private_postgres
from console.services.redis_server import start_private_redis

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class SecuredServices:
    database_url: str  # with its password: give it to console processes only
    redis_url: str
    run_dir: Path
    processes: list[tuple[subprocess.Popen, int]] = field(default_factory=list, repr=False)

    def env(self) -> dict[str, str]:
        """What a console process needs to use them."""
        return {"DATABASE_URL": self.database_url, "REDIS_URL": self.redis_url, "CELERY_BROKER_URL": self.redis_url}

    def manage(self, *args: str, env: dict[str, str] | None = None) -> str:
        """`manage.py ARGS` on these services (e.g. migrate, nodetoken NAME --quiet); its stdout."""
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True, text=True, check=False,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "console.settings", **(env or {}), **self.env()},
        )
        if done.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        return done.stdout

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of `query` on the console's database (what the test checks)."""
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            return conn.execute(query, params).fetchall()

    def stop(self) -> None:
        for process, stop_signal in self.processes:
            if process.poll() is None:
                process.send_signal(stop_signal)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def start_secured_services(run_dir: Path) -> SecuredServices:
    """Start both as `make run` does, and migrate the database."""
    database_url, postgres, _ = start_private_postgres(run_dir / "postgres")
    services = SecuredServices(database_url, "", run_dir, [(postgres, signal.SIGINT)])
    try:
        redis_dir = run_dir / "redis"
        services.redis_url, redis = start_private_redis(redis_dir, password=stored_secret(redis_dir / "password"))
        services.processes.append((redis, signal.SIGTERM))
        services.manage("migrate", "--noinput")
    except BaseException:
        services.stop()
        raise
    return services
