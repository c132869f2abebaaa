"""The benchmark's phases: connect, idle, jobs while capacity is free, a backlog drained with nodes
killed in the middle; each prints its figures."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from benchmarks._stack import ROOT, percentile
from nodeagent import protocol

from .agents import Fleet, FleetStats
from .probe import FLEET_PIDS, CpuSampler, Probe, console_usage
from .server import GRACE, Console, make_users, mint_tokens, scheduler_runs, watchdog_runs, worker_tasks


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
                  f"(grace {GRACE} s, watchdog every 1 s)")
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
