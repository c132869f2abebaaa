"""A throw-away console for benchmarks: its own PostgreSQL database, daphne, Celery, SeaweedFS.

Nothing here is mocked: the benchmarks drive the same processes `make run` starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from console.services.objectstore import start_seaweedfs  # noqa: E402
from console.services.ports import free_port, wait_for_port  # noqa: E402
from console.services.processes import beat_command, daphne_command, worker_command  # noqa: E402

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
        self._spawn(daphne_command(self.port), "daphne")
        if self.with_workers:
            self._spawn(worker_command(), "worker")
            self._spawn(beat_command(self.tmp / "beat"), "beat")
        wait_for_port(self.port)
        return self

    def _spawn(self, args: list[str], name: str) -> subprocess.Popen:
        with open(self.tmp / f"{name}.log", "ab") as log:
            process = subprocess.Popen(args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(process)
        return process

    def agent(self, name: str, token: str) -> subprocess.Popen:
        from jobs.tests.e2e.environments import ensure_environments

        work = self.tmp / "nodes" / name
        work.mkdir(parents=True, exist_ok=True)
        # the tests' environment cache, built once: a benchmark times jobs, not the first build
        env_cache = ensure_environments()
        return self._spawn([
            sys.executable, "-m", "nodeagent", "--console", self.url, "--token", token, "--name", name,
            "--gpus", "simulated:8", "--server-type", "g2", "--work-dir", str(work), "--address", "127.0.0.1",
            "--env-cache", str(env_cache),
        ], f"agent-{name}")

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
    (jobs.agent_writes). Each agent then names its placements in its hello."""
    from jobs.models import JobAttempt, Node, Placement, TrainingJob

    TrainingJob.objects.filter(pk=job.pk).update(current_attempt=1, status="Running")
    attempt = JobAttempt.objects.create(job=job, number=1, master_addr="127.0.0.1", master_port=29500)
    for rank, node_roles in enumerate(roles):
        node = Node.objects.create(name=f"bench-node-{rank}", server_type=job.server_type, address="127.0.0.1")
        for role in node_roles:
            Placement.objects.create(attempt=attempt, node=node, node_name=node.name, role=role, node_rank=rank,
                                     gpu_indices=list(range(gpus)), state="running")
