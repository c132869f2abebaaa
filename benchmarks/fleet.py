"""A fleet of simulated nodes against one console. Prints figures; asserts nothing.

Run: `.venv/bin/python benchmarks/fleet.py [--nodes 1000] [--jobs 1000] [--backlog 5000] [--job-seconds 10]`.
A real console (daphne, one Celery worker, beat) on a throw-away PostgreSQL database and Redis
db 9 (apart from the test workers' 14, 13, …), and `--nodes` simulated agents spread over
`--fleet-processes` processes (4), each with its own event loop: each agent speaks the real protocol over its
own WebSocket with its own node token (nodeagent.connection.Connection, nodeagent.spool.Spool,
unchanged; the spool skips fsync, as a thousand agents share this one disk). An agent "runs" a
placement by reporting it preparing and running, printing two lines, and exiting 0 after the
seconds its command sleeps. Three phases:

1. connect: agents connect at `--connect-rate` per second; hello → welcome times;
2. idle: `--idle-seconds` of heartbeats only: the console's CPU and memory;
3. jobs while capacity is free: `--jobs` jobs (1–2 nodes × 1–8 GPUs, `sleep --job-seconds`)
   created through the REST API by `--clients` users as fast as the API takes them: created →
   Running and agent message → ack while nothing has to wait;
4. a backlog: `--backlog` more jobs created while staff have every node cordoned, then every node
   uncordoned at once, as when a sweep is submitted faster than any API can place it one by one
   (on 2 cores the API takes ~15 jobs/s, far fewer than a thousand nodes finish): how busy the
   fleet's GPUs stay while jobs wait — held by placements as the console sees them, and running
   a command as the agents see it (a GPU whose exit the console has not yet processed is held
   but idle) — completions per minute against the ideal; `--kill` agents
   are killed during the drain (sockets dropped, no more heartbeats): how long until each is
   declared Lost under that load.

Throughout: connected and Lost nodes every 5 s, the heartbeat processing lag (when the console
stored a node's newest heartbeat minus when the agent sent it), created → Running, agent
message → ack, completions per minute against the ideal, how busy the fleet's GPUs are, the CPU
of the console, this fleet, PostgreSQL and Redis, and the scheduler's and the watchdog's runs
(from the worker's log). `--console-tree PATH` runs the console from another
checkout (e.g. an older commit) with this process's Python, for a before/after side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from console.services.ports import free_port, wait_for_port  # noqa: E402
from nodeagent import protocol  # noqa: E402
from nodeagent.connection import Connection  # noqa: E402
from nodeagent.logstream import Outbox  # noqa: E402
from nodeagent.spool import Spool  # noqa: E402

PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
DB = os.environ.get("BENCH_DATABASE", "simpleai_fleet")
REDIS = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")
GRACE = 30  # NODE_LOST_AFTER_SECONDS of the console under test


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


# -- the console under test -------------------------------------------------------------------

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


# -- the simulated fleet ----------------------------------------------------------------------

class TimedSpool(Spool):
    """A spool that notes when each message first went out and when its ack came back (and
    skips fsync: a thousand agents share this one disk)."""

    acks: list[float] = []  # message → ack latencies of every agent, seconds
    acks_by_kind: dict[str, list[float]] = {}  # the same, by message type (attempt reports by state)

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.sent_at: dict[int, tuple[float, str]] = {}

    def sync(self) -> None:
        self._file.flush()

    def unsent(self, after: int):
        batch = super().unsent(after)
        now = time.monotonic()
        for msg_id, text in batch:
            if msg_id not in self.sent_at:
                kind = re.search(r'"type":"(\w+)"', text)
                state = re.search(r'"state":"(\w+)"', text)
                self.sent_at[msg_id] = (now, (kind.group(1) if kind else "?") + (f" {state.group(1)}" if state else ""))
        return batch

    def ack(self, upto: int) -> None:
        now = time.monotonic()
        for msg_id in [m for m in self.sent_at if m <= upto]:
            sent, kind = self.sent_at.pop(msg_id)
            TimedSpool.acks.append(now - sent)
            TimedSpool.acks_by_kind.setdefault(kind, []).append(now - sent)
        super().ack(upto)

    @classmethod
    def clear(cls) -> None:
        cls.acks.clear()
        cls.acks_by_kind.clear()


class SimSupervisor:
    """Runs desired placements as timers: preparing, running, two lines, exit 0 after the sleep."""

    running_gpus = 0  # of this process's agents: GPUs whose command runs now (started, not yet exited)
    shared: Any = None  # the fleet's array of those counts, one slot per process (Fleet reads it)
    slot = 0
    seen_at: dict[tuple[int, int], float] = {}  # (job, attempt) → when its desired state reached an agent (epoch s)
    idle_gaps: list[float] = []  # a GPU's seconds between a command's exit and the next command's start

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.tasks: dict[str, asyncio.Task] = {}
        self.finished: set[str] = set()
        self.freed_at: dict[int, float] = {}  # GPU index → when its last command exited (monotonic)

    @classmethod
    def count_running(cls, change: int) -> None:
        cls.running_gpus += change
        if cls.shared is not None:
            cls.shared[cls.slot] = cls.running_gpus

    def running(self) -> list[protocol.RunningRef]:
        return [protocol.RunningRef(job_id=int(k.split("/")[0]), attempt=int(k.split("/")[1]), role=k.split("/")[2])
                for k in self.tasks]

    def ended(self) -> list[protocol.RunningRef]:
        return []

    def reconcile(self, placements: list[protocol.Placement]) -> None:
        wanted = {protocol.placement_key(p["job_id"], p["attempt"], p["role"]): p for p in placements}
        for key, placement in wanted.items():
            SimSupervisor.seen_at.setdefault((placement["job_id"], placement["attempt"]), time.time())
            if key not in self.tasks and key not in self.finished:
                self.tasks[key] = asyncio.get_running_loop().create_task(self._run(key, placement))
        for key in [k for k in self.tasks if k not in wanted]:
            self.tasks.pop(key).cancel()

    async def _run(self, key: str, placement: protocol.Placement) -> None:
        seconds = float(m.group(1)) if (m := re.search(r"sleep (\d+(?:\.\d+)?)", placement["command"])) else 1.0
        try:
            self.outbox.attempt(placement, "preparing")
            self.outbox.attempt(placement, "running")
            started = time.time()
            for gpu in placement["gpu_indices"]:
                if gpu in self.freed_at:
                    SimSupervisor.idle_gaps.append(time.monotonic() - self.freed_at.pop(gpu))
            self.outbox.logs(placement["job_id"], placement["attempt"], placement["role"],
                             [[1, started, f"[INFO] Starting the command: {placement['command']}"], [2, started, "training"]])
            SimSupervisor.count_running(len(placement["gpu_indices"]))
            try:
                await asyncio.sleep(seconds)
            finally:
                SimSupervisor.count_running(-len(placement["gpu_indices"]))
                self.freed_at.update(dict.fromkeys(placement["gpu_indices"], time.monotonic()))
            self.outbox.attempt(placement, "exited", exit_code=0)
        except asyncio.CancelledError:
            self.outbox.attempt(placement, "exited", signal=15)
            raise
        finally:
            self.finished.add(key)
            self.tasks.pop(key, None)


class SimAgent:
    def __init__(self, name: str, token: str, url: str, work: Path) -> None:
        self.name = name
        self.spool = TimedSpool(work / name)
        self.supervisor = SimSupervisor(Outbox(self.spool))
        node = protocol.NodeInfo(
            name=name, server_type="g2", address="127.0.0.1", cpus=96, memory_gb=2048, runtime="process",
            agent_version="fleet-sim",
            gpus=[protocol.GpuInfo(index=i, uuid=f"{name}-{i}", model="H100", memory_gb=80) for i in range(8)],
        )
        self.connection = Connection(url, token, node, self.spool, self.supervisor, on_welcome=self._welcomed)  # type: ignore[arg-type]
        self.opened = 0.0
        self.welcome_seconds: float | None = None
        self.task: asyncio.Task | None = None

    def _welcomed(self, welcome) -> None:
        if self.welcome_seconds is None:
            self.welcome_seconds = time.monotonic() - self.opened

    def start(self) -> None:
        self.opened = time.monotonic()
        self.task = asyncio.get_running_loop().create_task(self.connection.run())

    def kill(self) -> None:
        """As a node that loses power: its socket goes, nothing more is sent."""
        for task in self.supervisor.tasks.values():
            task.cancel()
        if self.task:
            self.task.cancel()


class Fleet:
    """The simulated agents, spread over `processes` processes, each with its own event loop.
    Real nodes do not share one: with a thousand agents on one loop, a start wave's desired
    states, spool writes and frames queued the console's acks behind the simulator's own work
    (0.1-0.5 s of the measured message→ack). Commands go to every process over a pipe, one at
    a time; GPUs running a command are read from a shared array without asking."""

    def __init__(self, processes: int, names: list[str], tokens: dict[str, str], urls: list[str], work: Path) -> None:
        context = multiprocessing.get_context("spawn")  # this process has threads and a Redis client
        self.running = context.Array("q", processes, lock=False)
        self.lock = threading.Lock()
        self.pipes, self.processes = [], []
        for slot in range(processes):
            mine = [(name, tokens[name], urls[i % len(urls)]) for i, name in enumerate(names) if i % processes == slot]
            parent, child = context.Pipe()
            process = context.Process(target=fleet_process, args=(child, slot, processes, self.running, mine, str(work)),
                                      daemon=True, name=f"fleet-{slot}")
            process.start()
            self.pipes.append(parent)
            self.processes.append(process)

    def ask(self, command: str, *args: Any) -> list[Any]:
        """Every process's answer to `command`, in slot order."""
        with self.lock:
            for pipe in self.pipes:
                pipe.send((command, args))
            return [pipe.recv() for pipe in self.pipes]

    def running_gpus(self) -> int:
        return sum(self.running)

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.pid is not None]

    def stop(self) -> None:
        with contextlib.suppress(OSError, EOFError):
            self.ask("stop")
        for process in self.processes:
            process.join(timeout=10)


def fleet_process(pipe, slot: int, processes: int, running, agents: list[tuple[str, str, str]], work: str) -> None:
    asyncio.run(serve_agents(pipe, slot, processes, running, agents, Path(work)))


async def serve_agents(pipe, slot: int, processes: int, running, specs: list[tuple[str, str, str]], work: Path) -> None:
    """One process of the fleet: its agents, and the answers to the Fleet's commands."""
    SimSupervisor.shared, SimSupervisor.slot = running, slot
    loop = asyncio.get_running_loop()
    agents = [SimAgent(name, token, url, work) for name, token, url in specs]
    lags: list[tuple[float, float]] = []  # (when, how late) this process's event loop woke up

    async def own_lag_forever() -> None:
        while True:
            began = time.monotonic()
            await asyncio.sleep(0.05)
            lags.append((began, time.monotonic() - began - 0.05))

    async def connect(rate: float) -> None:
        # the whole fleet connects at `rate` in name order: this process's i-th agent is the
        # fleet's (i * processes + slot)-th
        began = time.monotonic()
        for i, agent in enumerate(agents):
            await asyncio.sleep(max(0.0, began + (i * processes + slot) / rate - time.monotonic()))
            agent.start()

    tasks = {loop.create_task(own_lag_forever())}
    while True:
        command, args = await loop.run_in_executor(None, pipe.recv)
        answer: Any = None
        if command == "connect":
            tasks.add(loop.create_task(connect(*args)))
        elif command == "welcomed":
            answer = [a.welcome_seconds for a in agents if a.welcome_seconds is not None]
        elif command == "clear":  # from now on: acks, idle gaps (a cordoned queue's wait is not one)
            TimedSpool.clear()
            SimSupervisor.idle_gaps.clear()
            for agent in agents:
                agent.supervisor.freed_at.clear()
        elif command == "stats":
            since = args[0]
            answer = {"acks": TimedSpool.acks, "by_kind": TimedSpool.acks_by_kind, "gaps": SimSupervisor.idle_gaps,
                      "seen_at": SimSupervisor.seen_at, "lags": [lag for at, lag in lags if at >= since]}
        elif command == "kill":
            answer = {}
            for agent in agents:
                if agent.name in args[0]:
                    agent.kill()
                    answer[agent.name] = time.time()
        elif command == "stop":
            for agent in agents:
                agent.kill()
            await asyncio.sleep(0.5)
            pipe.send(None)
            return
        pipe.send(answer)


class FleetStats:
    """What the fleet's processes measured since a `clear`, put together."""

    def __init__(self, answers: list[dict]) -> None:
        self.acks = [a for answer in answers for a in answer["acks"]]
        self.by_kind: dict[str, list[float]] = {}
        for answer in answers:
            for kind, times in answer["by_kind"].items():
                self.by_kind.setdefault(kind, []).extend(times)
        self.gaps = [g for answer in answers for g in answer["gaps"]]
        self.seen_at = {k: v for answer in answers for k, v in answer["seen_at"].items()}
        self.lags = [lag for answer in answers for lag in answer["lags"]]

    def kinds(self) -> str:
        return "; ".join(f"{kind} p50 {percentile(times, 50):.3f} s, p99 {percentile(times, 99):.3f} s"
                         for kind, times in sorted(self.by_kind.items()))


# -- measuring --------------------------------------------------------------------------------

class Probe:
    def __init__(self, console: Console, fleet: Fleet) -> None:
        self.console, self.fleet = console, fleet
        self.db = psycopg.connect(f"{PG}/{DB}", autocommit=True)
        # t, connected, lost, GPUs held %, lag p99, jobs waiting, GPUs running a command %
        self.timeline: list[tuple[float, int, int, float, float, int, float]] = []

    def poll(self, t0: float, gpus: int) -> None:
        connected, lost = self.db.execute("SELECT count(*) FILTER (WHERE connected), count(*) FILTER (WHERE lost) FROM jobs_node").fetchone()
        held = self.db.execute(
            "SELECT coalesce(sum(jsonb_array_length(gpu_indices)), 0) FROM jobs_placement WHERE state IN ('assigned','preparing','running')"
        ).fetchone()[0]
        waiting = self.db.execute("SELECT count(*) FROM jobs_trainingjob WHERE status = 'Pending'").fetchone()[0]
        lag = self.lag_p99()
        running = 100 * self.fleet.running_gpus() / gpus if gpus else 0
        self.timeline.append((time.monotonic() - t0, connected, lost, 100 * held / gpus if gpus else 0, lag, waiting, running))

    def diagnose(self, t0: float) -> None:
        """Print what the database is doing: the longest transactions, their waits; listening."""
        rows = self.db.execute(r"""
            SELECT round(extract(epoch FROM now() - xact_start)::numeric, 1), state, coalesce(wait_event_type, ''),
                   coalesce(wait_event, ''), left(regexp_replace(query, '\s+', ' ', 'g'), 110)
            FROM pg_stat_activity WHERE datname = current_database() AND xact_start IS NOT NULL AND pid <> pg_backend_pid()
            ORDER BY xact_start LIMIT 3""").fetchall()
        listening = self.db.execute(
            "SELECT extract(epoch FROM now() - alive_at), extract(epoch FROM now() - listening_since) FROM jobs_consolelistening"
        ).fetchone()
        print(f"  [{time.monotonic() - t0:6.0f} s] listening: last {listening[0] if listening else 'n/a'} s ago, "
              f"for {listening[1] if listening else 'n/a'} s", flush=True)
        for row in rows:
            print(f"      {row[0]:>6} s {row[1]:<20} {row[2]:<8} {row[3]:<20} {row[4]}", flush=True)

    def unfinished(self) -> int:
        return self.db.execute(
            "SELECT count(*) FROM jobs_trainingjob WHERE status NOT IN ('Completed','Failed','Pending - internalerror',"
            "'Pending - maxretriesexceeded','Stopped')").fetchone()[0]

    def cordon_all(self, cordoned: bool) -> None:
        """Staff cordon (or uncordon) every node; the scheduler's beat tick picks it up."""
        self.db.execute("UPDATE jobs_node SET cordoned = %s, cordon_reason = %s", [cordoned, "fleet benchmark" if cordoned else ""])

    def lag_p99(self) -> float:
        try:
            rows = self.db.execute(
                "SELECT extract(epoch FROM last_heartbeat_at - last_sent_at) FROM jobs_node WHERE connected AND last_sent_at IS NOT NULL"
            ).fetchall()
        except psycopg.errors.UndefinedColumn:  # a console from before the agent's send time was kept
            return float("nan")
        return percentile([r[0] for r in rows], 99)

    def created_to_running(self, prefix: str) -> list[float]:
        rows = self.db.execute("""
            SELECT extract(epoch FROM r.created_at - p.created_at) FROM jobs_jobstatuschange p
            JOIN jobs_jobstatuschange r ON r.job_id = p.job_id AND r.new_status = 'Running'
            JOIN jobs_trainingjob j ON j.id = p.job_id AND j.name LIKE %s
            WHERE p.new_status = 'Pending' AND p.old_status = ''
        """, [prefix + "%"]).fetchall()
        return [r[0] for r in rows]

    def placed_to_agent(self, prefix: str, seen_at: dict[tuple[int, int], float]) -> list[float]:
        """Seconds from an attempt's creation (the scheduler placed it) to its desired state
        reaching an agent (`seen_at`: FleetStats), for these jobs."""
        rows = self.db.execute("""
            SELECT a.job_id, a.number, extract(epoch FROM a.created_at) FROM jobs_jobattempt a
            JOIN jobs_trainingjob j ON j.id = a.job_id AND j.name LIKE %s""", [prefix + "%"]).fetchall()
        return [seen_at[(job, number)] - float(created) for job, number, created in rows if (job, number) in seen_at]

    def completions_per_minute(self, prefix: str) -> list[int]:
        """Completions in each full minute from the first to the last completion of these jobs."""
        rows = self.db.execute("""
            SELECT c.created_at FROM jobs_jobstatuschange c JOIN jobs_trainingjob j ON j.id = c.job_id AND j.name LIKE %s
            WHERE c.new_status = 'Completed' ORDER BY 1
        """, [prefix + "%"]).fetchall()
        if not rows:
            return []
        first = rows[0][0]
        buckets = Counter(int((at - first).total_seconds() // 60) for (at,) in rows)
        return [buckets.get(i, 0) for i in range(max(buckets) + 1)]


FLEET_PIDS: list[int] = []  # the fleet's processes (Fleet), counted with this one as "fleet"


def fleet_processes() -> list[psutil.Process]:
    procs = [psutil.Process()]
    for pid in FLEET_PIDS:
        with contextlib.suppress(psutil.Error):
            procs.append(psutil.Process(pid))
    return procs


def console_usage(pids: list[int], seconds: float) -> tuple[float, float]:
    """CPU (% of one core) and resident memory (MB) of the console's processes over `seconds`;
    prints what the rest of the machine used meanwhile (this fleet, PostgreSQL, Redis)."""
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            procs += [proc, *proc.children(recursive=True)]
    others = {"fleet": fleet_processes(), "postgres": [], "redis": []}
    for proc in psutil.process_iter(["name"]):
        name = proc.info["name"] or ""
        if name.startswith(("postgres", "redis")):
            others["postgres" if name.startswith("postgres") else "redis"].append(proc)
    everything = procs + [p for group in others.values() for p in group]
    before = {}
    for p in everything:
        with contextlib.suppress(psutil.Error):
            before[p.pid] = sum(p.cpu_times()[:2])
    time.sleep(seconds)

    def used(group: list[psutil.Process]) -> float:
        total = 0.0
        for p in group:
            with contextlib.suppress(psutil.Error):
                total += sum(p.cpu_times()[:2]) - before.get(p.pid, 0)
        return 100 * total / seconds

    rss = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            rss += p.memory_info().rss
    print("    meanwhile, % of one core: " + ", ".join(f"{name} {used(group):.0f}" for name, group in others.items())
          + f" (the machine has {psutil.cpu_count()} cores)", flush=True)
    return used(procs), rss / 2**20


class CpuSampler(threading.Thread):
    """Every half second, the CPU each part of the machine used (daphne, the worker, PostgreSQL,
    Redis, this fleet), until stopped: a drain's peaks are seconds long, an average over a
    window after them hides them."""

    def __init__(self, console: Console) -> None:
        super().__init__(daemon=True)
        self.groups: dict[str, list[psutil.Process]] = {"fleet": fleet_processes(), "postgres": [], "redis": []}
        for name, process in console.processes.items():
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(process.pid)
                key = "daphne" if name.startswith("daphne") else name
                self.groups.setdefault(key, []).extend([proc, *proc.children(recursive=True)])
        for proc in psutil.process_iter(["name"]):
            name = proc.info["name"] or ""
            if name.startswith(("postgres", "redis")):
                self.groups["postgres" if name.startswith("postgres") else "redis"].append(proc)
        self.samples: list[tuple[float, dict[str, float]]] = []  # (monotonic, group → CPU seconds so far)
        self.done = threading.Event()

    def _used(self) -> dict[str, float]:
        used = {}
        for name, procs in self.groups.items():
            total = 0.0
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    total += sum(proc.cpu_times()[:2])
            used[name] = total
        return used

    def run(self) -> None:
        while not self.done.is_set():
            self.samples.append((time.monotonic(), self._used()))
            self.done.wait(0.5)
        self.samples.append((time.monotonic(), self._used()))

    def stop(self) -> str:
        """Each part's mean share of one core over the run, and its busiest five seconds."""
        self.done.set()
        self.join()
        (t0, first), (t1, last) = self.samples[0], self.samples[-1]
        parts = []
        for name in first:
            peak = 0.0
            for i, (at, used) in enumerate(self.samples):
                later = next(((t, u) for t, u in self.samples[i:] if t - at >= 5), None)
                if later is not None:
                    peak = max(peak, (later[1][name] - used[name]) / (later[0] - at))
            parts.append(f"{name} {100 * (last[name] - first[name]) / (t1 - t0):.0f} (busiest 5 s: {100 * peak:.0f})")
        return ", ".join(parts)


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


# -- the run ----------------------------------------------------------------------------------

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


def create_jobs(url: str, tokens: list[str], count: int, seconds: float, rng: random.Random,
                clients: int = 4, prefix: str = "fleet") -> tuple[list[float], float]:
    """Create `count` jobs through the API from `clients` threads (each its own user); returns
    the API latencies and the mean GPUs a job asks for."""
    shapes = [(rng.choice([1, 2, 4, 8]), rng.choice([1, 1, 2])) for _ in range(count)]

    def one(i: int) -> float:
        per_node, nodes = shapes[i]
        body = json.dumps({
            "name": f"{prefix}-{i}", "learning_type": "on_demand", "framework": "pytorch", "framework_version": "2.13.0",
            "server_type": "g2", "gpus_per_node": per_node, "memory_gb": 256 * per_node, "node_count": nodes,
            "shm_size_gb": 8, "image_url": "registry.example.com/trainer:1", "keep_alive_minutes": 0,
            "command": f"sleep {seconds}", "tags": [],
        }).encode()
        request = urllib.request.Request(f"{url}/api/v1/training-jobs/", data=body, method="POST", headers={
            "Content-Type": "application/json", "Authorization": f"Token {tokens[i % len(tokens)]}"})
        began = time.monotonic()
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
        return time.monotonic() - began

    with ThreadPoolExecutor(clients) as pool:
        latencies = list(pool.map(one, range(count)))
    return latencies, sum(p * n for p, n in shapes) / max(count, 1)


async def run(args) -> None:
    tree = Path(args.console_tree).resolve() if args.console_tree else ROOT
    console = Console(tree, args.daphnes)
    console.start()
    work = console.tmp / "agents"
    names = [f"fleet-{i:04d}" for i in range(args.nodes)]
    tokens = mint_tokens(console, names)
    users = make_users(console, max(4, args.clients))
    urls = [f"ws://127.0.0.1:{port}{protocol.AGENT_PATH}" for port in console.ports]
    fleet = Fleet(args.fleet_processes, names, tokens, urls, work)
    FLEET_PIDS[:] = fleet.pids()
    probe = Probe(console, fleet)
    gpus = 8 * args.nodes
    t0 = time.monotonic()
    loop = asyncio.get_running_loop()

    async def sample_forever():
        ticks = 0
        while True:
            await loop.run_in_executor(None, probe.poll, t0, gpus)
            ticks += 1
            if args.diagnose and ticks % 5 == 0:
                await loop.run_in_executor(None, probe.diagnose, t0)
            await asyncio.sleep(2)

    def ask(command: str, *args):
        return loop.run_in_executor(None, fleet.ask, command, *args)

    sampler = loop.create_task(sample_forever())
    print(f"console: {console.tree} ({len(console.ports)} daphne), {args.nodes} simulated nodes × 8 GPUs "
          f"in {args.fleet_processes} processes")

    # 1. connect
    await ask("connect", args.connect_rate)
    deadline = time.monotonic() + len(names) / args.connect_rate + 120
    welcomes: list[float] = []
    while len(welcomes) < len(names) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        welcomes = [w for answer in await ask("welcomed") for w in answer]
    connected_in = time.monotonic() - t0
    print(f"connect: {len(welcomes)}/{len(names)} welcomed in {connected_in:.1f} s "
          f"(at {args.connect_rate}/s); hello→welcome p50 {percentile(welcomes, 50):.3f} s, p99 {percentile(welcomes, 99):.3f} s")

    # 2. idle
    await asyncio.sleep(10)
    cpu, rss = await loop.run_in_executor(None, console_usage, console.pids(), args.idle_seconds)
    lost_idle = probe.timeline[-1][2] if probe.timeline else 0
    print(f"idle {args.idle_seconds} s: console CPU {cpu:.0f} % of one core, RSS {rss:.0f} MB; "
          f"heartbeat lag p99 {probe.lag_p99():.2f} s; nodes Lost (falsely) {lost_idle}")

    # 3. jobs while capacity is free
    url = f"http://127.0.0.1:{console.ports[0]}"
    rng = random.Random(7)
    await ask("clear")
    runs_before = len(scheduler_runs(console.worker_log()))
    job_t0 = time.monotonic()
    api_latencies, _ = await loop.run_in_executor(None, create_jobs, url, users, args.jobs, args.job_seconds, rng,
                                                  args.clients, "free")
    created_in = time.monotonic() - job_t0
    usage_cpu, usage_rss = await loop.run_in_executor(None, console_usage, console.pids(), 5)
    await wait_until_ended(loop, probe, args.job_seconds + 300)
    statuses = Counter(r[0] for r in probe.db.execute("SELECT status FROM jobs_trainingjob").fetchall())
    to_running = probe.created_to_running("free")
    measured = FleetStats(await ask("stats", job_t0))
    acks = measured.acks
    runs = scheduler_runs(console.worker_log())[runs_before:]
    print(f"jobs while capacity is free: {args.jobs} created through the API in {created_in:.0f} s "
          f"({args.jobs / created_in:.1f}/s; API p50 {percentile(api_latencies, 50) * 1000:.0f} ms, "
          f"p99 {percentile(api_latencies, 99) * 1000:.0f} ms); {dict(statuses)}")
    print(f"  created→Running p50 {percentile(to_running, 50):.2f} s, p99 {percentile(to_running, 99):.2f} s")
    pushed = probe.placed_to_agent("free", measured.seen_at)
    print(f"  placed→agent (the desired state's way) p50 {percentile(pushed, 50):.2f} s, p99 {percentile(pushed, 99):.2f} s")
    print(f"  agent message→ack p50 {percentile(acks, 50):.3f} s, p99 {percentile(acks, 99):.3f} s ({len(acks)} messages)")
    print(f"    by message: {measured.kinds()}")
    print(f"  console CPU while jobs were created {usage_cpu:.0f} % of one core, RSS {usage_rss:.0f} MB")
    print(f"  scheduler: {len(runs)} runs for {args.jobs} jobs ({len(runs) / max(args.jobs, 1):.2f} per job); "
          f"run time p50 {percentile(runs, 50) * 1000:.0f} ms, p99 {percentile(runs, 99) * 1000:.0f} ms")

    # 4. a backlog drained by the whole fleet, with nodes killed in the middle
    if args.backlog:
        await loop.run_in_executor(None, probe.cordon_all, True)
        _, avg_gpus = await loop.run_in_executor(None, create_jobs, url, users, args.backlog, args.job_seconds, rng,
                                                 args.clients, "backlog")
        await ask("clear")  # the queue was cordoned: that wait is not a GPU's idle gap
        runs_before = len(scheduler_runs(console.worker_log()))
        drain_t0, drain_wall = time.monotonic(), time.time()
        await loop.run_in_executor(None, probe.cordon_all, False)
        # from the release on: the first wave (thousands of placements at once) is the hard part
        profilers = start_profilers(console, args) if args.profile else []
        sampler_cpu = CpuSampler(console)
        sampler_cpu.start()
        logged = console.log_sizes()
        killed: dict[str, float] = {}
        declared: dict[str, float] = {}

        since_beat: dict[str, float] = {}  # seconds from the node's last heartbeat (as sent) to Lost

        async def watch_killed():
            # when it was declared: its placements' end, written in the watchdog's transaction
            # (exact), else when this poll saw it (up to 0.5 s late: a node that held nothing)
            while len(declared) < len(killed):
                rows = await loop.run_in_executor(None, lambda: probe.db.execute(
                    "SELECT n.name, extract(epoch FROM n.last_sent_at), extract(epoch FROM min(p.ended_at)) "
                    "FROM jobs_node n LEFT JOIN jobs_placement p ON p.node_id = n.id AND p.state = 'lost' "
                    "AND p.ended_at >= to_timestamp(%s) WHERE n.lost AND n.name = ANY(%s) GROUP BY n.id",
                    [min(killed.values()), list(killed)]).fetchall())
                for name, last_sent, ended in rows:
                    if name not in declared:
                        at = float(ended) if ended is not None else time.time()
                        declared[name] = at - killed[name]
                        since_beat[name] = at - float(last_sent) if last_sent is not None else float("nan")
                await asyncio.sleep(0.5)

        watcher = None
        if args.kill:
            await asyncio.sleep(args.job_seconds * 2)
            for answer in await ask("kill", names[-args.kill:]):
                killed.update(answer)
            watcher = loop.create_task(watch_killed())
        await wait_until_ended(loop, probe, args.max_drain_seconds)
        drained_in = time.monotonic() - drain_t0
        drain_cpu = sampler_cpu.stop()
        if watcher is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watcher, timeout=GRACE * 3)
        statuses = Counter(r[0] for r in probe.db.execute(
            "SELECT status FROM jobs_trainingjob WHERE name LIKE 'backlog%'").fetchall())
        per_minute = probe.completions_per_minute("backlog")
        ideal = (gpus * 60 / avg_gpus / args.job_seconds) if avg_gpus else 0
        ideal_drain = args.backlog * avg_gpus * args.job_seconds / gpus
        runs = scheduler_runs(console.worker_log())[runs_before:]
        waited = [row for row in probe.timeline if row[0] >= drain_t0 - t0 + 5 and row[5] > 0]
        busy, running = [row[3] for row in waited], [row[6] for row in waited]
        measured = FleetStats(await ask("stats", drain_t0))
        acks = measured.acks
        print(f"backlog: {args.backlog} jobs queued on a cordoned fleet, then uncordoned: ended in {drained_in:.0f} s "
              f"(ideal {ideal_drain:.0f} s: every GPU busy, {avg_gpus:.1f} GPUs per job); {dict(statuses)}")
        print(f"  GPUs held by placements while jobs waited: mean {statistics.mean(busy) if busy else float('nan'):.0f} %, "
              f"min {min(busy) if busy else float('nan'):.0f} % ({len(busy)} samples); running a command (as the agents "
              f"see it): mean {statistics.mean(running) if running else float('nan'):.0f} %, "
              f"min {min(running) if running else float('nan'):.0f} %")
        print(f"  completions per minute: {per_minute}; ideal {ideal:.0f}")
        gaps, pushed = measured.gaps, probe.placed_to_agent("backlog", measured.seen_at)
        print(f"  a GPU between one command's exit and the next one's start: p50 {percentile(gaps, 50):.2f} s, "
              f"p90 {percentile(gaps, 90):.2f} s, p99 {percentile(gaps, 99):.2f} s; "
              f"placed→agent p50 {percentile(pushed, 50):.2f} s, p99 {percentile(pushed, 99):.2f} s")
        print(f"  agent message→ack p50 {percentile(acks, 50):.3f} s, p99 {percentile(acks, 99):.3f} s ({len(acks)} messages)")
        print(f"    by message: {measured.kinds()}")
        own = measured.lags
        print(f"    of which the simulated fleet's own lag (its event loops waking late): p50 {percentile(own, 50):.3f} s, "
              f"p99 {percentile(own, 99):.3f} s, max {max(own, default=0):.3f} s")
        print(f"  CPU while draining, % of one core (the machine has {psutil.cpu_count()}): {drain_cpu}")
        print(f"  garbage-collection pauses over 50 ms while draining: {console.collector_pauses(logged)}")
        print(f"  scheduler: {len(runs)} runs; run time p50 {percentile(runs, 50) * 1000:.0f} ms, "
              f"p99 {percentile(runs, 99) * 1000:.0f} ms, max {max(runs, default=0) * 1000:.0f} ms")
        watchdog = watchdog_runs(console.worker_log(), drain_wall)
        gaps = [b[0] - a[0] for a, b in zip(watchdog, watchdog[1:], strict=False)]
        print(f"  watchdog: {len(watchdog)} runs in {drained_in:.0f} s; longest gap between runs {max(gaps, default=0):.1f} s, "
              f"longest run {max((r[1] for r in watchdog), default=0):.2f} s")
        tasks = worker_tasks(console.worker_log(), drain_wall)
        print("  worker tasks: " + "; ".join(
            f"{name.rsplit('.', 1)[-1]} {len(times)}× (max {max(times):.1f} s, {sum(times):.0f} s in all)"
            for name, times in sorted(tasks.items(), key=lambda item: -sum(item[1]))))
        unfinished = Counter(r[0][:90] for r in probe.db.execute(
            "SELECT status || ': ' || status_reason FROM jobs_trainingjob WHERE name LIKE 'backlog%' AND status <> 'Completed'").fetchall())
        for reason, count in unfinished.most_common(5):
            print(f"  not completed: {count} × {reason}")
        if killed:
            times = list(declared.values())
            beats = list(since_beat.values())
            print(f"  killed {len(killed)} nodes: {len(times)} declared Lost, after {percentile(times, 50):.1f} s median, "
                  f"{max(times, default=float('nan')):.1f} s at most; {percentile(beats, 50):.1f} s median, "
                  f"{max(beats, default=float('nan')):.1f} s at most after the last heartbeat it sent "
                  f"(grace {GRACE} s, watchdog every 2 s)")
        for profiler in profilers:
            profiler.wait()
    sampler.cancel()
    print("timeline (s, connected, Lost, GPUs held %, heartbeat lag p99 s, jobs waiting, GPUs running a command %):")
    for t, connected, lost, busy_pct, lag, waiting, running_pct in probe.timeline[:: max(1, len(probe.timeline) // 40)]:
        print(f"  {t:6.0f} {connected:6d} {lost:5d} {busy_pct:6.1f} {lag:8.2f} {waiting:6d} {running_pct:6.1f}")
    await loop.run_in_executor(None, fleet.stop)
    console.stop(args.logs)


async def wait_until_ended(loop, probe: Probe, limit: float) -> None:
    """Until every job ended, or `limit` seconds passed."""
    began = time.monotonic()
    while await loop.run_in_executor(None, probe.unfinished) and time.monotonic() - began < limit:
        await asyncio.sleep(1)


def start_profilers(console: Console, args) -> list[subprocess.Popen]:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    Path(args.profile).mkdir(parents=True, exist_ok=True)  # py-spy does not make it, and fails silently
    return [
        subprocess.Popen(
            [py_spy, "record", "--pid", str(process.pid), "--format", "raw", "--rate", str(args.profile_rate), "--subprocesses", "--nonblocking",
             "-o", str(Path(args.profile) / f"{name}.txt"), "--duration", str(int(args.profile_seconds))],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for name, process in console.processes.items() if name.startswith(("daphne", "worker"))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=1000, help="jobs created while capacity is free")
    parser.add_argument("--backlog", type=int, default=5000, help="jobs queued on a cordoned fleet, then drained")
    parser.add_argument("--max-drain-seconds", type=float, default=900)
    parser.add_argument("--job-seconds", type=float, default=10)
    parser.add_argument("--connect-rate", type=float, default=50, help="agents connecting per second")
    parser.add_argument("--idle-seconds", type=float, default=60)
    parser.add_argument("--kill", type=int, default=10, help="agents killed during the drain")
    parser.add_argument("--daphnes", type=int, default=1, help="daphne processes (agents are spread over them)")
    parser.add_argument("--fleet-processes", type=int, default=4,
                        help="processes the simulated agents are spread over, each with its own event loop")
    parser.add_argument("--clients", type=int, default=4, help="threads creating jobs through the API")
    parser.add_argument("--console-tree", default="", help="run the console from this checkout instead")
    parser.add_argument("--logs", default="", help="a directory: the console's logs (daphne, worker, beat) are copied there at the end")
    parser.add_argument("--profile", default="", help="a directory: py-spy samples daphne and the worker from the backlog's release on")
    parser.add_argument("--profile-seconds", type=float, default=60)
    parser.add_argument("--profile-rate", type=int, default=50, help="py-spy samples per second")
    parser.add_argument("--diagnose", action="store_true", help="every 10 s: the longest transactions and listening")
    args = parser.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
