"""`make run`: everything of a development console in the foreground, stopped by Ctrl-C.

Starts a private PostgreSQL (unless DATABASE_URL names one), finds or starts Redis, starts
object storage, migrates, creates the first admin, then runs daphne, a Celery worker and
Celery beat and two local node agents, and supervises them: if one dies, all stop. Ctrl-C
stops them in order, each within the stop grace: the agents first (they stop their jobs and
report to a console that still listens), then the console and Celery, then the stores.
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
from console.services.objectstore import start_seaweedfs
from console.services.ports import port_answers, wait_for_port
from console.services.postgres_server import start_private_postgres
from console.services.processes import beat_command, console_commands, worker_command
from console.services.redis_server import redis_answers, start_private_redis

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = ROOT / ".run"


@dataclass
class Child:
    name: str
    process: subprocess.Popen
    stage: int  # stopped in order: agents (0), console and Celery (1), the stores (2)
    stop_signal: int = signal.SIGTERM


class Supervisor:
    AGENTS, SERVICES, STORES = 0, 1, 2

    def __init__(self, grace: float) -> None:
        self.children: list[Child] = []
        self.stopping = False
        self.grace = grace  # each stage stops within it; only a child that overruns is killed

    def start(self, name: str, args: list[str], env: dict[str, str], stage: int = SERVICES,
              pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
        process = subprocess.Popen(args, cwd=ROOT, env=env, start_new_session=True, pass_fds=pass_fds)
        self.children.append(Child(name, process, stage))
        return process

    def adopt(self, name: str, process: subprocess.Popen, stop_signal: int = signal.SIGTERM) -> None:
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
                    return 1
            time.sleep(0.5)
        return 0


def _redis(sup: Supervisor, env: dict[str, str]) -> None:
    url = env.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    if redis_answers(url):
        print(f"Redis: {url}")
        return
    url, process = start_private_redis(RUN_DIR / "redis")
    sup.adopt("redis", process)
    env["REDIS_URL"] = url
    print(f"Redis: none answered; started a private one at {url}")


def _database(sup: Supervisor, env: dict[str, str]) -> None:
    if env.get("DATABASE_URL"):
        print("Database: DATABASE_URL")
        return
    url, process, source = start_private_postgres(RUN_DIR / "postgres")
    sup.adopt("postgres", process, stop_signal=signal.SIGINT)  # SIGINT: PostgreSQL's fast shutdown
    env["DATABASE_URL"] = url
    print(f"Database: a private PostgreSQL ({source}), data in {RUN_DIR / 'postgres' / 'data'}")


def _object_store(sup: Supervisor, env: dict[str, str]) -> None:
    if env.get("S3_ENDPOINT_URL"):
        print(f"Object storage: {env['S3_ENDPOINT_URL']}")
        return
    port = int(env.get("OBJECT_STORE_PORT", "8333"))
    if port_answers(port):
        port = 0
    store = start_seaweedfs(RUN_DIR / "seaweedfs", s3_port=port or None)
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
    runtime_args, agent_env = _local_runtime(env) if count else ([], env)
    for i in range(1, count + 1):
        name = f"local-node-{i}"
        token = subprocess.run(
            [sys.executable, "manage.py", "nodetoken", name, "--quiet"],
            cwd=ROOT, env=env, check=True, capture_output=True, text=True,
        ).stdout.strip()
        sup.start(name, [
            sys.executable, "-m", "nodeagent", "--console", f"http://127.0.0.1:{port}", "--token", token,
            "--name", name, "--gpus", env.get("LOCAL_NODE_GPUS", "simulated:8"),
            "--server-type", env.get("LOCAL_NODE_SERVER_TYPE", "g2"), "--work-dir", str(RUN_DIR / "nodes" / name),
            *runtime_args,
        ], agent_env, stage=Supervisor.AGENTS)
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
    time.sleep(0.5)  # the agents' "connected" lines
    print("\n" + ready_banner(f"http://127.0.0.1:{port}/", admin_note, env, storage_is_local=local_storage) + "\n", flush=True)


def _consoles(sup: Supervisor, env: dict[str, str], port: str) -> None:
    """One daphne, or CONSOLE_PROCESSES of them sharing the port (a large fleet: one process
    handles about a thousand idle agents; see the README's "A thousand nodes")."""
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
    sup = Supervisor(grace=float(env.get("JOB_STOP_GRACE_SECONDS", "30")) + 10)
    # Ctrl-C (even where a parent shell ignored SIGINT for background jobs) and SIGTERM stop all
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        RUN_DIR.mkdir(exist_ok=True)
        _database(sup, env)
        _redis(sup, env)
        _object_store(sup, env)
        python = sys.executable
        subprocess.run([python, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True)
        # kept for the final box: printed here it would scroll away among the start-up lines
        admin_note = subprocess.run([python, "manage.py", "ensure_admin"], cwd=ROOT, env=env, check=True,
                                    capture_output=True, text=True).stdout
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
