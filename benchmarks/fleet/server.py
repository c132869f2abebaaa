"""The console under test: a throw-away database, daphne(s), one Celery worker and beat, from this
checkout or another (`--console-tree`); what its logs say of the scheduler, watchdog and tasks."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from console.services.ports import free_port, wait_for_port

PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
DB = os.environ.get("BENCH_DATABASE", "simpleai_fleet")
REDIS = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")
GRACE = 10  # NODE_LOST_AFTER_SECONDS of the console under test (its default: 2 s beats, watchdog every 1 s)


class Console:
    def __init__(self, tree: Path, daphnes: int) -> None:
        self.tree, self.tmp = tree, Path(tempfile.mkdtemp(prefix="simpleai-fleet-"))
        self.ports = [free_port() for _ in range(daphnes)]
        self.processes: dict[str, subprocess.Popen] = {}
        self.env = {
            **os.environ, "DJANGO_SETTINGS_MODULE": "console.settings", "DATABASE_URL": f"{PG}/{DB}",
            "REDIS_URL": REDIS, "CHANNELS_PREFIX": "simpleai-fleet", "NODE_LOST_AFTER_SECONDS": str(GRACE),
            "JOB_STOP_GRACE_SECONDS": "5", "SCHEDULER_TICK_SECONDS": "5", "PYTHONUNBUFFERED": "1",
            "S3_ENDPOINT_URL": "", "LOG_LEVEL": "WARNING",
        }

    def start(self) -> None:
        for sql in (f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", f"CREATE DATABASE {DB}"):
            subprocess.run(["psql", f"{PG}/postgres", "-qc", sql], check=True, capture_output=True)
        subprocess.run(["redis-cli", "-u", REDIS, "flushdb"], check=True, capture_output=True)
        python = sys.executable
        subprocess.run([python, "manage.py", "migrate", "-v0"], cwd=self.tree, env=self.env, check=True)
        for i, port in enumerate(self.ports):
            self._spawn(f"daphne-{i}", self._daphne(python, port))
        self._spawn("worker", [python, "-m", "celery", "-A", "console", "worker", "-P", "threads", "-c", "4",
                               "-l", "info", *self._queues()])
        self._spawn("beat", [python, "-m", "celery", "-A", "console", "beat", "-l", "warning", "-s", str(self.tmp / "beat")])
        for port in self.ports:
            wait_for_port(port, timeout=60)

    def _daphne(self, python: str, port: int) -> list[str]:
        if (self.tree / "console" / "services" / "processes.py").exists():
            code = f"from console.services.processes import daphne_command; print(' '.join(daphne_command({port})))"
            return subprocess.run([python, "-c", code], cwd=self.tree, capture_output=True, text=True, check=True).stdout.split()
        return [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "console.asgi:application"]

    def _queues(self) -> list[str]:
        processes = self.tree / "console" / "services" / "processes.py"
        return ["-Q", "celery,watchdog"] if processes.exists() else []

    def _spawn(self, name: str, args: list[str]) -> None:
        with open(self.tmp / f"{name}.log", "ab") as log:
            self.processes[name] = subprocess.Popen(args, cwd=self.tree, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                                    start_new_session=True)

    def manage(self, code: str) -> str:
        return subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=self.tree, env=self.env,
                              capture_output=True, text=True, check=True).stdout

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes.values() if p.poll() is None]

    def worker_log(self) -> str:
        return (self.tmp / "worker.log").read_text(errors="replace")

    def log_sizes(self) -> dict[str, int]:
        return {name: (self.tmp / f"{name}.log").stat().st_size for name in self.processes}

    def collector_pauses(self, since: dict[str, int]) -> str:
        """The garbage-collection pauses each part logged (console.collector) since `since`."""
        parts = []
        for name, offset in since.items():
            with open(self.tmp / f"{name}.log", "rb") as log:
                log.seek(offset)
                pauses = [(int(gen), float(s)) for gen, s in re.findall(
                    r"garbage collection of generation (\d) paused this process for ([0-9.]+) s", log.read().decode(errors="replace"))]
            if pauses:
                full = [s for gen, s in pauses if gen == 2]
                parts.append(f"{name} {len(pauses)} ({len(full)} full, {sum(full):.1f} s in all), longest {max(s for _, s in pauses):.2f} s")
        return "; ".join(parts) or "none"

    def stop(self, keep_logs: str = "") -> None:
        for process in self.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        subprocess.run(["psql", f"{PG}/postgres", "-qc", f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)"], capture_output=True)
        if keep_logs:
            shutil.copytree(self.tmp, keep_logs, dirs_exist_ok=True, ignore=shutil.ignore_patterns("beat*"))
        shutil.rmtree(self.tmp, ignore_errors=True)


def scheduler_runs(log: str) -> list[float]:
    return [float(s) for s in re.findall(r"Task jobs\.tasks\.schedule_jobs\[[^\]]+\] succeeded in ([0-9.e-]+)s", log)]


def worker_tasks(log: str, since: float) -> dict[str, list[float]]:
    """Run times of every task the worker finished since `since` (epoch seconds), by task name."""
    runs: dict[str, list[float]] = {}
    for stamp, name, seconds in re.findall(
        r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): INFO[^\]]*\] Task ([\w.]+)\[[^\]]+\] succeeded in ([0-9.e-]+)s", log,
    ):
        if time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) + int(stamp[20:]) / 1000 >= since:
            runs.setdefault(name, []).append(float(seconds))
    return runs


def watchdog_runs(log: str, since: float) -> list[tuple[float, float]]:
    """(when it ended, epoch seconds; how long it ran) of each heartbeat watchdog run since `since`."""
    runs = []
    for stamp, seconds in re.findall(
        r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): INFO[^\]]*\] Task jobs\.tasks\.watch_heartbeats\[[^\]]+\] succeeded in ([0-9.e-]+)s", log,
    ):
        ended = time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) + int(stamp[20:]) / 1000
        if ended >= since:
            runs.append((ended, float(seconds)))
    return runs


def make_users(console: Console, tokens: int) -> list[str]:
    code = (
        "from django.contrib.auth import get_user_model; from rest_framework.authtoken.models import Token\n"
        f"for i in range({tokens}):\n"
        "    u = get_user_model().objects.create_user(f'fleet{i}')\n"
        "    print(Token.objects.create(user=u).key)\n"
    )
    return re.findall(r"^[0-9a-f]{40}$", console.manage(code), re.MULTILINE)


def mint_tokens(console: Console, names: list[str]) -> dict[str, str]:
    code = (
        "import json, secrets; from jobs.models import NodeToken\n"
        "try:\n    from jobs.nodes.models import hash_token\n"
        "except ImportError:  # a console from before the node registry package (--console-tree)\n"
        "    from jobs.models.nodes import hash_token\n"
        f"names = {names!r}\nout = {{}}\nrows = []\n"
        "for n in names:\n    t = 'sat_' + secrets.token_urlsafe(32); out[n] = t; rows.append(NodeToken(name=n, token_hash=hash_token(t)))\n"
        "NodeToken.objects.bulk_create(rows)\nprint(json.dumps(out))\n"
    )
    return json.loads(console.manage(code).strip().splitlines()[-1])
