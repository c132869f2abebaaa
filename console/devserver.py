"""`make run`: everything of a development console in the foreground, stopped by Ctrl-C.

Starts a private PostgreSQL (unless DATABASE_URL names one) and a private Redis (unless
REDIS_URL names one), both requiring a password made once and kept under .run/ (0600), starts
object storage, migrates, creates the first admin, then runs daphne, a Celery worker and
Celery beat and two local node agents, and supervises them: if one dies, all stop. Ctrl-C
stops them in order, each within the stop grace: the agents first (they stop their jobs and
report to a console that still listens), then the console and Celery, then the stores.

The processes' own output (daphne's access log, Celery's and the agents' lines, warnings) goes to
one file each under .run/logs/, so the final box stays on screen; the box says where they are,
and a process that dies has the end of its file printed.

The stores' credentials go to the console's processes only: the agents (and so their jobs, which
run on this machine) get an environment without them (`agent_environment`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from console.banner import ready_banner
from console.services.credentials import redacted, stored_secret
from console.services.objectstore import start_seaweedfs
from console.services.ports import port_answers, wait_for_port
from console.services.postgres_server import start_private_postgres
from console.services.processes import agent_environment, beat_command, console_commands, worker_command
from console.services.redis_server import redis_answers, start_private_redis

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = ROOT / ".run"
LOG_DIR = RUN_DIR / "logs"
TAIL_LINES = 20  # of a dead process's log, printed when it stops everything


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    stage: int  # stopped in order: agents (0), console and Celery (1), the stores (2)
    stop_signal: int = signal.SIGTERM


class Supervisor:
    AGENTS, SERVICES, STORES = 0, 1, 2

    def __init__(self, grace: float, log_dir: Path | None = None) -> None:
        self.children: list[Child] = []
        self.stopping = False
        self.grace = grace  # each stage stops within it; only a child that overruns is killed
        self.log_dir = log_dir  # None: the children write to the terminal

    def log_file(self, name: str) -> Path | None:
        return self.log_dir / f"{name}.log" if self.log_dir else None

    def start(self, name: str, args: list[str], env: dict[str, str], stage: int = SERVICES,
              pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
        path = self.log_file(name)
        if path is None:
            process = subprocess.Popen(args, cwd=ROOT, env=env, start_new_session=True, pass_fds=pass_fds)
        else:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with path.open("a") as log:  # the child holds its own copy of the descriptor
                log.write(f"--- {name} started by make run at {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n")
                log.flush()
                process = subprocess.Popen(args, cwd=ROOT, env=env, start_new_session=True, pass_fds=pass_fds,
                                           stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self.children.append(Child(name, process, stage))
        return process

    def adopt(self, name: str, process: subprocess.Popen[bytes], stop_signal: int = signal.SIGTERM) -> None:
        self.children.append(Child(name, process, self.STORES, stop_signal))

    def stop_all(self) -> None:
        self.stopping = True
        started = time.monotonic()
        for stage in (self.AGENTS, self.SERVICES, self.STORES):
            children = [c for c in self.children if c.stage == stage and c.process.poll() is None]
            for child in children:
                os.killpg(child.process.pid, child.stop_signal)
            deadline = time.monotonic() + self.grace
            for child in children:
                try:
                    child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    print(f"{child.name} did not stop within {self.grace:.0f} s; killing it")
                    os.killpg(child.process.pid, signal.SIGKILL)
                    child.process.wait()
        print(f"Stopped in {time.monotonic() - started:.1f} s.")

    def wait(self) -> int:
        while not self.stopping:
            for child in self.children:
                if child.process.poll() is not None:
                    print(f"\n{child.name} exited with code {child.process.returncode}; stopping everything.")
                    self._print_tail(child.name)
                    return 1
            time.sleep(0.5)
        return 0

    def _print_tail(self, name: str) -> None:
        """The end of a dead child's log: why it died is usually there."""
        path = self.log_file(name)
        if path is None or not path.exists():
            return
        lines = path.read_text(errors="replace").splitlines()[-TAIL_LINES:]
        print(f"The last lines of {_shown(path)}:", *(f"  {line}" for line in lines), sep="\n")


def _shown(path: Path) -> str:
    """A path as the user typed `make run` from the repository root: relative where it can be."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _redis(sup: Supervisor, env: dict[str, str]) -> None:
    """The operator's Redis (REDIS_URL), or a private one on loopback that requires a password."""
    if env.get("REDIS_URL"):
        url = env["REDIS_URL"]
        if not redis_answers(url):
            raise SystemExit(f"REDIS_URL={redacted(url)} does not answer (unset it for a private Redis)")
        print(f"Redis: REDIS_URL ({redacted(url)})")
        return
    run_dir = RUN_DIR / "redis"
    url, process = start_private_redis(run_dir, password=stored_secret(run_dir / "password"))
    sup.adopt("redis", process)
    env["REDIS_URL"] = url
    print(f"Redis: a private one at {redacted(url)}, password in {run_dir / 'password'}")


def _database(sup: Supervisor, env: dict[str, str]) -> None:
    if env.get("DATABASE_URL"):
        print("Database: DATABASE_URL")
        return
    run_dir = RUN_DIR / "postgres"
    url, process, source = start_private_postgres(run_dir)
    sup.adopt("postgres", process, stop_signal=signal.SIGINT)  # SIGINT: PostgreSQL's fast shutdown
    env["DATABASE_URL"] = url
    print(f"Database: a private PostgreSQL ({source}), data in {run_dir / 'data'}, password in {run_dir / 'password'}")


def _object_store(sup: Supervisor, env: dict[str, str]) -> None:
    if env.get("S3_ENDPOINT_URL"):
        print(f"Object storage: {env['S3_ENDPOINT_URL']}")
        return
    port = int(env.get("OBJECT_STORE_PORT", "8333"))
    if port_answers(port):
        port = 0
    store = start_seaweedfs(RUN_DIR / "seaweedfs", s3_port=port or None)
    assert store.process is not None  # start_seaweedfs returns the store it started
    sup.adopt("seaweedfs", store.process)
    env.update(store.env())
    print(f"Object storage: SeaweedFS S3 at {store.endpoint} (key {store.access_key})")


def _local_runtime(env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """Containers where a Docker Engine API answers, the process runtime otherwise (LOCAL_NODE_RUNTIME
    = auto | docker | process); says which. Returns the agents' extra flags and environment."""
    choice = env.get("LOCAL_NODE_RUNTIME", "auto")
    if choice not in ("auto", "docker", "process"):
        raise SystemExit(f"LOCAL_NODE_RUNTIME must be auto, docker or process, not {choice!r}")
    process = "commands run on this machine and the job's image is not used"
    if choice == "process":
        print(f"Runtime: process (LOCAL_NODE_RUNTIME=process): {process}.")
        return [], env
    from nodeagent.runtimes.docker import find_engine

    found = find_engine(env)
    if found is None:
        where = env.get("DOCKER_HOST") or "/var/run/docker.sock or /run/podman/podman.sock"
        if choice == "docker":
            raise SystemExit(f"LOCAL_NODE_RUNTIME=docker, but no Docker Engine API answers at {where} (set DOCKER_HOST)")
        print(f"Runtime: process (no Docker Engine API answers at {where}): {process}.")
        return [], env
    url, product = found
    print(f"Runtime: docker ({product} at {url}): every job runs in its AI Training Image, pulled with its credentials.")
    return ["--runtime", "docker"], {**env, "DOCKER_HOST": url}


def _local_nodes(sup: Supervisor, env: dict[str, str], port: str) -> None:
    """Two simulated GPU nodes on this machine, so a job really runs out of the box."""
    count = int(env.get("LOCAL_NODES", "2"))
    runtime_args, agent_env = _local_runtime(agent_environment(env)) if count else ([], env)
    # every local node mounts a tenant's File Storage share from here (`DIR/<user id>`)
    runtime_args = [*runtime_args, "--file-storage-root", str(RUN_DIR / "file-storage")]
    if count and "docker" not in runtime_args and os.geteuid() != 0:
        # a sandbox gives each job a Unix user of its own, which only root can do
        print("Local nodes run jobs as your own user, without a sandbox (make run is not root: --no-isolation).")
        runtime_args.append("--no-isolation")
    for i in range(1, count + 1):
        name = f"local-node-{i}"
        token = subprocess.run(
            [sys.executable, "manage.py", "nodetoken", name, "--quiet"],
            cwd=ROOT, env=env, check=True, capture_output=True, text=True,
        ).stdout.strip()
        sup.start(name, [
            sys.executable, "-m", "nodeagent", "--console", f"http://127.0.0.1:{port}", "--name", name, "--gpus", env.get("LOCAL_NODE_GPUS", "simulated:8"),
            "--server-type", env.get("LOCAL_NODE_SERVER_TYPE", "g2"), "--work-dir", str(RUN_DIR / "nodes" / name),
            *runtime_args,
        ], {**agent_env, "NODEAGENT_TOKEN": token}, stage=Supervisor.AGENTS)  # not on the command line: every user reads that
    if count:
        print(f"Started {count} local node agent(s) with simulated GPUs (LOCAL_NODES={count}).")


def _announce_ready(env: dict[str, str], port: str, admin_note: str, local_storage: bool) -> None:
    """Print the box (URL, admin password, S3 endpoint and keys) once the console answers and
    the Celery worker replies, so it comes after their start-up lines."""
    with contextlib.suppress(TimeoutError):  # a console that died is reported by the supervisor
        wait_for_port(int(port), timeout=60)
    for _ in range(15):
        ping = subprocess.run([sys.executable, "-m", "celery", "-A", "console", "inspect", "ping", "--timeout", "1"],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        if ping.returncode == 0:
            break
    print("\n" + ready_banner(f"http://127.0.0.1:{port}/", admin_note, env, storage_is_local=local_storage,
                              log_dir=_shown(LOG_DIR)) + "\n", flush=True)


def _consoles(sup: Supervisor, env: dict[str, str], port: str) -> None:
    """One daphne, or CONSOLE_PROCESSES of them sharing the port (a large fleet: one process
    handles about a thousand idle agents; see docs/architecture/agent-channel.md)."""
    value = env.get("CONSOLE_PROCESSES", "1")
    if not value.isdigit() or int(value) < 1:
        raise SystemExit(f"CONSOLE_PROCESSES must be a whole number of daphne processes (1 or more), not {value!r}")
    commands, sock = console_commands(port, int(value))
    for name, args in commands:  # with several, the kernel spreads the connections over them
        sup.start(name, args, env, pass_fds=(sock.fileno(),) if sock else ())
    if sock is not None:
        sock.close()  # the daphnes hold their own copies


def main() -> int:
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    env["PYTHONUNBUFFERED"] = "1"
    port = env.get("PORT", "8000")
    # a stage may take the jobs' stop grace (agents: SIGTERM → grace → SIGKILL) and a little more
    sup = Supervisor(grace=float(env.get("JOB_STOP_GRACE_SECONDS", "30")) + 10, log_dir=LOG_DIR)
    # Ctrl-C (even where a parent shell ignored SIGINT for background jobs) and SIGTERM stop all
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        # the local services' data and the nodes' work dirs: nothing a job on a local node may read
        RUN_DIR.mkdir(mode=0o700, exist_ok=True)
        RUN_DIR.chmod(0o700)
        _database(sup, env)
        _redis(sup, env)
        _object_store(sup, env)
        python = sys.executable
        subprocess.run([python, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True)
        # kept for the final box: printed here it would scroll away among the start-up lines
        admin_note = subprocess.run([python, "manage.py", "ensure_admin"], cwd=ROOT, env=env, check=True,
                                    capture_output=True, text=True).stdout
        # every user's storage space, and (once, after an upgrade) existing jobs' data moved into them;
        # a store that refuses (an external one without SeaweedFS's IAM API) says why, and the
        # console starts all the same: spaces are made again on first need
        subprocess.run([python, "manage.py", "storage_spaces", "--provision-all"], cwd=ROOT, env=env, check=False)
        _consoles(sup, env, port)
        # at "info" both log every 5-second tick, and the final box scrolls away within a minute
        celery_level = env.get("CELERY_LOG_LEVEL", "warning")
        sup.start("celery-worker", worker_command(celery_level, python=python), env)
        sup.start("celery-beat", beat_command(RUN_DIR / "celerybeat-schedule", celery_level, python=python), env)
        _local_nodes(sup, env, port)
        _announce_ready(env, port, admin_note, local_storage=not os.environ.get("S3_ENDPOINT_URL"))
        return sup.wait()
    except KeyboardInterrupt:
        print("\nStopping…")
        return 0
    finally:
        sup.stop_all()


if __name__ == "__main__":
    sys.exit(main())
