"""What is measured from outside the fleet: the console's database (nodes, placements, jobs,
history) and the machine's processes (CPU and memory of the console, the fleet, PostgreSQL, Redis)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter

import psutil
import psycopg

from benchmarks._stack import percentile

from .agents import Fleet
from .server import DB, PG, Console


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
