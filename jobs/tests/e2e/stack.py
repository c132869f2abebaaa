"""Real processes for end-to-end tests: daphne (console), Celery worker + beat, node agents.

Everything talks over real connections: PostgreSQL (the test database), Redis, SeaweedFS,
WebSockets between agents and daphne.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from console.services.ports import free_port, wait_for_port
from console.services.processes import agent_environment, beat_command, console_commands, worker_command

ROOT = Path(settings.BASE_DIR)


def database_url() -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.postgresql":
        raise RuntimeError("end-to-end tests need PostgreSQL (run them through `make test`)")
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    host, port = db["HOST"] or "127.0.0.1", db["PORT"] or 5432
    if host.startswith("/"):  # a Unix socket directory (make run's private PostgreSQL)
        return f"postgres://{auth}@/{db['NAME']}?host={host}&port={port}"
    return f"postgres://{auth}@{host}:{port}/{db['NAME']}"


def console_env(object_store, database: str, redis: str, channels_prefix: str) -> dict[str, str]:
    """The environment of the stack's console processes (and, less the console's credentials, its agents)."""
    return {
        **os.environ,
        **object_store.env(),
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "DATABASE_URL": database,
        "REDIS_URL": redis,
        "CELERY_BROKER_URL": redis,
        "CHANNELS_PREFIX": channels_prefix,
        # the agents fence themselves after 60 % of this: long enough to ride out a console restart
        "NODE_LOST_AFTER_SECONDS": "20",
        "JOB_STOP_GRACE_SECONDS": "5",
        "SCHEDULER_TICK_SECONDS": "1",
        "PYTHONUNBUFFERED": "1",
    }


def _stop(process: subprocess.Popen, timeout: float = 15) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


@dataclass
class Agent:
    name: str
    token: str
    work_dir: Path
    log_path: Path
    args: list[str]
    env: dict[str, str]
    process: subprocess.Popen | None = None

    def start(self) -> Agent:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        return self

    def stop(self) -> None:
        if self.process:
            _stop(self.process)

    def kill(self) -> None:
        """SIGKILL the agent alone (its training processes live in their own groups)."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass
class Stack:
    env: dict[str, str]
    log_dir: Path
    port: int = field(default_factory=free_port)
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    agents: list[Agent] = field(default_factory=list)
    env_cache: Path | None = None  # the agents' shared training environments (--env-cache)
    console_processes: int = 1  # daphne processes sharing the port (more than one: one listening socket)
    # the nodes' File Storage (--file-storage-root): a tenant's share is <root>/<user id>, as on a
    # cluster whose nodes all mount one network file system at the same place
    file_storage_root: Path | None = None

    def __post_init__(self) -> None:
        if self.file_storage_root is None:
            self.file_storage_root = self.log_dir / "file-storage"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _spawn(self, name: str, args: list[str], pass_fds: tuple[int, ...] = ()) -> None:
        with open(self.log_dir / f"{name}.log", "ab") as log:
            self.processes[name] = subprocess.Popen(
                args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                pass_fds=pass_fds,
            )

    def start_console(self) -> None:
        commands, sock = console_commands(self.port, self.console_processes)  # as make run's CONSOLE_PROCESSES
        for name, args in commands:
            self._spawn(name, args, (sock.fileno(),) if sock else ())
        if sock is not None:
            sock.close()
        wait_for_port(self.port, timeout=30)

    def daphnes(self) -> dict[str, subprocess.Popen]:
        return {name: p for name, p in self.processes.items() if name.startswith("daphne")}

    def stop_console(self) -> None:
        for name in self.daphnes():
            _stop(self.processes.pop(name))

    def start_workers(self) -> None:
        self._spawn("worker", worker_command(log_level="info"))
        self._spawn("beat", beat_command(self.log_dir / "beat-schedule"))

    def agent(self, name: str, token: str, gpus: str = "simulated:8", server_type: str = "g2", extra: tuple[str, ...] = (),
              env: dict[str, str] | None = None, work_name: str = "", file_storage: bool = True) -> Agent:
        """Start an agent; `extra` are more flags, `env` more variables (e.g. DOCKER_HOST);
        `work_name` names its work dir when it is not the node's name (a second agent of a node);
        `file_storage=False`: a node without File Storage (no --file-storage-root)."""
        work_dir = self.log_dir / "nodes" / (work_name or name)
        work_dir.mkdir(parents=True, exist_ok=True)
        args = [
            sys.executable, "-m", "nodeagent", "--console", self.url, "--name", name,
            "--gpus", gpus, "--server-type", server_type, "--work-dir", str(work_dir), "--address", "127.0.0.1",
            *(("--env-cache", str(self.env_cache)) if self.env_cache else ()),
            *(("--file-storage-root", str(self.file_storage_root)) if file_storage else ()), *extra,
        ]
        # as make run starts them: without the console's credentials (a job on the node must not find
        # them), the token in the agent's environment, never on its command line (readable by every user)
        agent_env = {**agent_environment(self.env), **(env or {}), "NODEAGENT_TOKEN": token}
        agent = Agent(name, token, work_dir, self.log_dir / f"agent-{work_name or name}.log", args, agent_env)
        self.agents.append(agent)
        return agent.start()

    def share(self, tenant_id: int) -> Path:
        """A tenant's File Storage share as the nodes see it (made here if missing; the agents give
        it to the tenant's group on first use)."""
        assert self.file_storage_root is not None
        share = self.file_storage_root / str(tenant_id)
        share.mkdir(parents=True, exist_ok=True)
        return share

    def stop(self) -> None:
        for agent in self.agents:
            agent.stop()
        for process in self.processes.values():
            _stop(process)

    def logs(self) -> str:
        """Every process log, for a failing test's report."""
        parts = []
        for path in sorted(self.log_dir.glob("*.log")):
            text = path.read_text(errors="replace")
            parts.append(f"===== {path.name} =====\n{text[-6000:]}")
        return "\n".join(parts)


def wait_until(predicate, timeout: float = 60, interval: float = 0.25, message: str = "condition"):
    """Poll `predicate` until it returns something truthy; raise with `message` on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {message}")
