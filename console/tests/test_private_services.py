"""`make run`'s private PostgreSQL and Redis trust no one: jobs run on the same machine.

Real servers in temporary directories: each refuses a connection without its password, keeps the
password where only its owner reads it, and never shows it on a command line.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import tempfile
from pathlib import Path

import psycopg
import pytest
import redis

from console import devserver
from console.services.postgres_server import start_private_postgres, system_bindir
from console.services.processes import agent_environment
from console.services.redis_server import start_private_redis

ROOT = Path(__file__).resolve().parents[2]
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to try as another Unix user")


@pytest.fixture
def service_dir():
    """A directory for a server's files outside pytest's base temporary directory: the server runs
    as `postgres` when we are root, and each pytest session (another one on this machine too)
    sets that base back to 0700, cutting the server off from its files."""
    path = Path(tempfile.mkdtemp(prefix="simpleai-services-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def private_postgres(service_dir):
    """make run's PostgreSQL, in a directory of this test: (run dir, url); stopped after it."""
    run_dir = service_dir / "postgres"
    url, process, _ = start_private_postgres(run_dir)
    yield run_dir, url
    process.send_signal(signal.SIGINT)
    process.wait(timeout=30)


def _connect(run_dir: Path, password: str | None) -> None:
    psycopg.connect(host=str(run_dir / "socket"), port=5432, user="postgres", password=password, dbname="simpleai",
                    connect_timeout=5).close()


def test_the_private_postgresql_refuses_a_connection_without_its_password(private_postgres):
    run_dir, url = private_postgres
    with pytest.raises(psycopg.OperationalError, match="no password supplied"):
        _connect(run_dir, None)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        _connect(run_dir, "a-guess")
    psycopg.connect(url).close()  # what the console's processes are given
    assert stat.S_IMODE((run_dir / "password").stat().st_mode) == 0o600


@as_root
def test_another_unix_user_cannot_reach_the_private_postgresqls_socket_even_with_the_password(private_postgres):
    run_dir, url = private_postgres
    bindir = system_bindir()
    if bindir is None or not (bindir / "psql").exists():
        pytest.skip("no system psql to try with")
    probe = subprocess.run([str(bindir / "psql"), url, "-c", "SELECT 1"], user="nobody", capture_output=True,
                           text=True, cwd="/")
    assert probe.returncode != 0 and "Permission denied" in probe.stderr, probe.stderr


def test_a_data_directory_that_trusted_everyone_requires_the_password_at_its_next_start(service_dir):
    """An earlier `make run` made its cluster with trust authentication and no password."""
    run_dir = service_dir / "postgres"
    _, process, _ = start_private_postgres(run_dir)
    process.send_signal(signal.SIGINT)
    process.wait(timeout=30)
    (run_dir / "data" / "pg_hba.conf").write_text("local all all trust\n")
    (run_dir / "password").unlink()

    url, process, _ = start_private_postgres(run_dir)
    try:
        with pytest.raises(psycopg.OperationalError, match="no password supplied"):
            _connect(run_dir, None)
        psycopg.connect(url).close()  # the new password works
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


def test_the_private_redis_requires_its_password_and_keeps_it_off_its_command_line(tmp_path):
    url, process = start_private_redis(tmp_path / "redis", password="s3cret-Of-the-console")
    try:
        bare = url.replace(":s3cret-Of-the-console@", "")
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(bare).ping()
        assert redis.Redis.from_url(url).ping()
        assert b"s3cret" not in Path(f"/proc/{process.pid}/cmdline").read_bytes()
        assert url.startswith("redis://:s3cret-Of-the-console@127.0.0.1:")  # loopback only
        assert stat.S_IMODE((tmp_path / "redis" / "redis.conf").stat().st_mode) == 0o600
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_make_run_starts_a_private_redis_with_a_password_unless_redis_url_is_set(tmp_path, monkeypatch):
    monkeypatch.setattr(devserver, "RUN_DIR", tmp_path)
    sup = devserver.Supervisor(grace=5)
    env: dict[str, str] = {}
    try:
        devserver._redis(sup, env)
        password = (tmp_path / "redis" / "password").read_text().strip()
        assert env["REDIS_URL"].startswith(f"redis://:{password}@127.0.0.1:")
        assert redis.Redis.from_url(env["REDIS_URL"]).ping()
        assert stat.S_IMODE((tmp_path / "redis" / "password").stat().st_mode) == 0o600
        operator = {"REDIS_URL": env["REDIS_URL"].replace("/0", "/3")}
        devserver._redis(sup, operator)  # the operator's choice is used as it is
        assert operator == {"REDIS_URL": env["REDIS_URL"].replace("/0", "/3")} and len(sup.children) == 1
    finally:
        sup.stop_all()


def test_the_local_agents_get_none_of_the_consoles_credentials():
    console_env = {
        "PATH": "/usr/bin", "DATABASE_URL": "postgres://postgres:pw@/simpleai", "REDIS_URL": "redis://:pw@127.0.0.1:1/0",
        "CELERY_BROKER_URL": "redis://:pw@127.0.0.1:1/1", "SECRET_KEY": "k", "SECRET_KEY_FILE": "/run/secrets/k",
        "FIELD_ENCRYPTION_KEY": "f", "S3_ENDPOINT_URL": "http://127.0.0.1:8333", "S3_ACCESS_KEY": "a",
        "S3_SECRET_KEY": "s", "LOCAL_NODE_GPUS": "simulated:8",
    }
    assert agent_environment(console_env) == {"PATH": "/usr/bin", "LOCAL_NODE_GPUS": "simulated:8"}
