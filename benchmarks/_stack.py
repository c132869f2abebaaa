"""What every benchmark shares: a throw-away console (its own PostgreSQL database, daphne, Celery,
SeaweedFS), a migrated database alone, the job a benchmark creates, a simulated agent's hello,
waiting, and percentiles.

Nothing here is mocked: the benchmarks drive the same processes `make run` starts. Imports only
console.services at the top (no Django before a BenchStack or BenchDatabase has set it up).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # a script run by its path (python benchmarks/x.py) finds the project too

from console.services.objectstore import start_seaweedfs  # noqa: E402
from console.services.ports import free_port, wait_for_port  # noqa: E402
from console.services.processes import agent_environment, beat_command, daphne_command, worker_command  # noqa: E402

BENCH_DB = os.environ.get("BENCH_DATABASE", "simpleai_bench")
BENCH_PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")


class BenchStack:
    def __init__(self, with_workers: bool = True) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="simpleai-bench-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.processes: list[subprocess.Popen] = []
        self.with_workers = with_workers
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "console.settings",
            "DATABASE_URL": f"{BENCH_PG}/{BENCH_DB}",
            "REDIS_URL": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9"),
            "CHANNELS_PREFIX": "simpleai-bench",
            "JOB_STOP_GRACE_SECONDS": "5",
            "SCHEDULER_TICK_SECONDS": "1",
            "PYTHONUNBUFFERED": "1",
        }

    def __enter__(self) -> BenchStack:
        subprocess.run(["psql", BENCH_PG + "/postgres", "-qc", f"DROP DATABASE IF EXISTS {BENCH_DB}"], check=True)
        subprocess.run(["psql", BENCH_PG + "/postgres", "-qc", f"CREATE DATABASE {BENCH_DB}"], check=True)
        self.store = start_seaweedfs(self.tmp / "s3")
        self.env.update(self.store.env())
        os.environ.update({k: v for k, v in self.env.items() if k != "PYTHONUNBUFFERED"})
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=self.env, check=True)
        import django

        django.setup()
        self.daphne = self._spawn(daphne_command(self.port), "daphne")
        if self.with_workers:
            self._spawn(worker_command(), "worker")
            self._spawn(beat_command(self.tmp / "beat"), "beat")
        wait_for_port(self.port)
        return self

    def _spawn(self, args: list[str], name: str, env: dict[str, str] | None = None, agent: bool = False) -> subprocess.Popen:
        # as make run's: an agent gets none of the console's credentials (each placement brings its attempt's own keys)
        base = agent_environment(self.env) if agent else self.env
        with open(self.tmp / f"{name}.log", "ab") as log:
            process = subprocess.Popen(args, cwd=ROOT, env={**base, **(env or {})}, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        self.processes.append(process)
        return process

    def restart_console(self, down_seconds: float = 2.0) -> None:
        """Stop daphne (SIGTERM), wait, and start it again on the same port (agents reconnect)."""
        import signal
        import time

        daphne = self.daphne
        os.killpg(daphne.pid, signal.SIGTERM)
        daphne.wait(timeout=30)
        time.sleep(down_seconds)
        self.daphne = self._spawn(daphne_command(self.port), "daphne")
        wait_for_port(self.port)

    def agent(self, name: str, token: str, gpus: int = 8) -> subprocess.Popen:
        from jobs.tests.e2e.environments import ensure_environments

        work = self.tmp / "nodes" / name
        work.mkdir(parents=True, exist_ok=True)
        # the tests' environment cache, built once: a benchmark times jobs, not the first build
        env_cache = ensure_environments()
        return self._spawn([
            sys.executable, "-m", "nodeagent", "--console", self.url, "--name", name,
            "--gpus", f"simulated:{gpus}", "--server-type", "g2", "--work-dir", str(work), "--address", "127.0.0.1",
            "--env-cache", str(env_cache),
        ], f"agent-{name}", env={"NODEAGENT_TOKEN": token}, agent=True)  # never on the command line: every user reads that

    def start_agents(self, names: list[str], timeout: float = 120.0) -> None:
        """One agent per name, each with a node token of its own; returns once all are connected."""
        from jobs.models import Node, NodeToken

        for name in names:
            self.agent(name, NodeToken.mint(name)[1])
        wait_for(lambda: Node.objects.filter(connected=True).count() == len(names), timeout=timeout, interval=0.05)

    def upload_as(self, user, key: str, path: Path) -> str:
        """Put a file into the user's own storage space with their own keys; its s3:// URL."""
        from jobs.storage import iam
        from jobs.storage.spaces import ensure_space

        space = ensure_space(user.pk)
        iam.s3_as(space.access_key, space.secret_key, self.store.endpoint).upload_file(str(path), space.bucket, key)
        return f"s3://{space.bucket}/{key}"

    def __exit__(self, *exc) -> None:
        import signal

        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        self.store.stop()
        from django.db import connections

        connections.close_all()
        subprocess.run(["psql", BENCH_PG + "/postgres", "-qc", f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)"], check=False)


class BenchDatabase:
    """Only a migrated throw-away database (for benchmarks of console code without processes)."""

    def __enter__(self) -> BenchDatabase:
        subprocess.run(["psql", BENCH_PG + "/postgres", "-qc", f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)"], check=True)
        subprocess.run(["psql", BENCH_PG + "/postgres", "-qc", f"CREATE DATABASE {BENCH_DB}"], check=True)
        os.environ.update({
            "DJANGO_SETTINGS_MODULE": "console.settings", "DATABASE_URL": f"{BENCH_PG}/{BENCH_DB}",
            "REDIS_URL": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9"),
        })
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=os.environ, check=True)
        import django

        django.setup()
        return self

    def __exit__(self, *exc) -> None:
        from django.db import connections

        connections.close_all()
        subprocess.run(["psql", BENCH_PG + "/postgres", "-qc", f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)"], check=False)


def connected_nodes(count: int) -> None:
    """`count` connected 8-GPU g2 nodes, bench-0000, bench-0001, … (in a BenchDatabase)."""
    from django.utils import timezone

    from jobs.models import Node, NodeGPU, ServerType

    g2 = ServerType.objects.get(name="g2")
    now = timezone.now()
    rows = Node.objects.bulk_create([
        Node(name=f"bench-{i:04d}", server_type=g2, address="127.0.0.1", connected=True, last_heartbeat_at=now)
        for i in range(count)
    ])
    NodeGPU.objects.bulk_create([
        NodeGPU(node=node, index=i, uuid=f"{node.name}-{i}", model="H100", memory_gb=80) for node in rows for i in range(8)
    ])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def run_on_bench_nodes(job, roles: list[list[str]], gpus: int) -> None:
    """The job runs its attempt 1 on nodes bench-node-0, 1, … (roles[i] on node i), as the
    scheduler would have placed it: a node may write logs and metrics only of its own placements
    (jobs.channel.writes). Each agent then names its placements in its hello."""
    from jobs.models import JobAttempt, Node, Placement, TrainingJob

    TrainingJob.objects.filter(pk=job.pk).update(current_attempt=1, status="Running")
    attempt = JobAttempt.objects.create(job=job, number=1, master_addr="127.0.0.1", master_port=29500)
    for rank, node_roles in enumerate(roles):
        node = Node.objects.create(name=f"bench-node-{rank}", server_type=job.server_type, address="127.0.0.1")
        for role in node_roles:
            Placement.objects.create(attempt=attempt, node=node, node_name=node.name, role=role, node_rank=rank,
                                     gpu_indices=list(range(gpus)), state="running")


T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.005) -> T:
    """`predicate`'s first truthy value, polled every `interval` seconds; TimeoutError after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f} s")


def api_user(name: str = "bench") -> tuple[Any, str]:
    """A new user and their API token (in a BenchStack)."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    user = get_user_model().objects.create_user(name)
    return user, Token.objects.create(user=user).key


def post_json(url: str, token: str, payload: dict) -> dict:
    """POST `payload` as JSON with the user's API token; the answer's JSON (standard library only)."""
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Token {token}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def api_job(name: str, **changes: Any) -> dict[str, Any]:
    """The body of POST /api/v1/training-jobs/ for a one-node, 8-GPU g2 job running `true`."""
    return {
        "name": name, "learning_type": "on_demand", "framework": "pytorch", "server_type": "g2",
        "gpus_per_node": 8, "memory_gb": 2048, "node_count": 1, "shm_size_gb": 64, "image_url": "trainer:1",
        "command": "true", **changes,
    }


def job_fields(name: str, **changes: Any) -> dict[str, Any]:
    """What jobs.actions.create_job takes for a one-node, 8-GPU g2 job running `true`."""
    return {
        "name": name, "learning_type": "on_demand", "framework": "pytorch", "framework_version": "2.13.0",
        "failover_enabled": False, "server_type": "g2", "gpus_per_node": 8, "memory_gb": 2048, "node_count": 1,
        "shm_size_gb": 64, "image_url": "trainer:1", "registry_username": "", "volume_mount_path": "",
        "script_url": "", "command": "true", **changes,
    }


def agent_hello(name: str, running: list[dict[str, Any]], gpus: int = 8) -> str:
    """A simulated agent's hello frame: node `name` of server type g2, running `running`."""
    return json.dumps({"type": "hello", "protocol": 1, "running": running, "node": {
        "name": name, "server_type": "g2", "address": "127.0.0.1", "cpus": 2, "memory_gb": 24,
        "runtime": "process", "agent_version": "bench",
        "gpus": [{"index": i, "uuid": f"GPU-{name}-{i}", "model": "NVIDIA H100 SXM", "memory_gb": 80} for i in range(gpus)],
    }})


def agent_socket(url: str, token: str, max_size: int | None = 2**24) -> Any:
    """A WebSocket to the console's agent endpoint with a node token (`async with`)."""
    from websockets.asyncio.client import connect

    return connect(url.replace("http", "ws") + "/ws/agent/", additional_headers={"Authorization": f"Bearer {token}"},
                   max_size=max_size)
