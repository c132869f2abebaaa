"""Scheduler run time on a busy shared cluster. Prints figures; asserts nothing.

Run: `.venv/bin/python -m benchmarks.scheduler_run [--nodes 100] [--jobs 1000] [--runs 5]`.
A throw-away PostgreSQL database holds `--nodes` 8-GPU nodes and `--jobs` queued jobs of
several users (1–4 nodes × 1–8 GPUs, one in five spot, one in four users with a GPU quota),
and the real scheduler run (jobs.scheduling.scheduler_run.run: ledger, policies, placement, attempts,
waiting reasons) is timed:

- first run: places what fits into the empty cluster (attempts, placements, history rows);
- steady runs: the cluster is full and every queued job still waits — the run that repeats
  on every event and tick while a queue is long;
- the plain placement alone (jobs.scheduling.placement.schedule on the same ledger), for the split
  between deciding and reading/writing the database;
- a run whose every waiting reason changes (a fleet's backlog: the counts in the reasons move
  on every run), with the live events really sent through the Channels layer on Redis
  (BENCH_REDIS_URL): all of a run's events sent together (jobs.events.batched) against one
  send per event (the console before), side by side, alternating.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import random
import statistics
import time
from unittest import mock

from benchmarks._stack import BenchDatabase, connected_nodes, job_fields


def populate(nodes: int, jobs: int, seed: int = 7) -> None:
    from django.contrib.auth import get_user_model

    from jobs import actions
    from workspaces.models import Quota

    connected_nodes(nodes)
    users = [get_user_model().objects.create(username=f"user{i}") for i in range(20)]
    for user in users[::4]:
        Quota.objects.create(user=user, max_gpus_in_use=64)
    rng = random.Random(seed)
    for i in range(jobs):
        gpus = rng.choice([1, 2, 4, 8, 8])
        count = rng.choice([1, 1, 2, 4])
        owner = rng.choice(users)
        actions.create_job(owner, job_fields(
            f"job-{i}", learning_type="spot" if i % 5 == 0 else "on_demand", gpus_per_node=gpus, memory_gb=256 * gpus,
            node_count=count, shm_size_gb=8, image_url="registry/trainer:1",
        ), [])


def timed_run() -> tuple[float, int, object]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from jobs.scheduling import scheduler_run

    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        summary = scheduler_run.run()
        elapsed = time.perf_counter() - started
    return elapsed, len(queries), summary


def plain_placement() -> float:
    from jobs.models import TrainingJob
    from jobs.scheduling import policy, scheduler_run
    from jobs.scheduling.capacity_load import load_ledger
    from jobs.scheduling.placement import schedule

    ledger = load_ledger()
    waiting = list(TrainingJob.objects.filter(status__in=scheduler_run.WAITING).select_related("server_type"))
    run = policy.current().begin(waiting, ledger)
    requests = [run.shape(scheduler_run._request(job)) for job in waiting]
    started = time.perf_counter()
    schedule(requests, ledger, run)
    return time.perf_counter() - started


def reason_rewrite_run(together: bool) -> float:
    """One run after every waiting reason was reset, so each one changes and is sent live."""
    from jobs import actions, events
    from jobs.models import TrainingJob
    from jobs.scheduling import scheduler_run

    TrainingJob.objects.filter(status__in=scheduler_run.WAITING).update(status_reason="Waiting to be scheduled")
    batch = events.batched if together else contextlib.nullcontext
    with mock.patch.object(events, "batched", batch), mock.patch.object(actions, "batched", batch):
        started = time.perf_counter()
        scheduler_run.run()
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--event-rounds", type=int, default=3, help="rounds of the live-event comparison (0: skip)")
    parser.add_argument("--profile", default="", help="a file: cProfile statistics of the steady runs")
    args = parser.parse_args()
    with BenchDatabase():
        # requests for another run and live events go nowhere: nothing listens in a benchmark
        with mock.patch("jobs.channel.notify.request_schedule"), mock.patch("jobs.actions.send_job_event"):
            populate(args.nodes, args.jobs)
            first, first_queries, summary = timed_run()
            print(f"{args.nodes} nodes × 8 GPUs, {args.jobs} queued jobs")
            print(f"first run: {first * 1000:.0f} ms, {first_queries} queries; placed {summary.placed}, "
                  f"waiting {summary.waiting}")
            profile = cProfile.Profile() if args.profile else None
            if profile is not None:
                profile.enable()
            steady = [timed_run() for _ in range(args.runs)]
            if profile is not None:
                profile.disable()
                profile.dump_stats(args.profile)
            times = [t for t, _, _ in steady]
            print(f"steady run ({steady[0][2].waiting} jobs waiting, cluster full): median {statistics.median(times) * 1000:.0f} ms, "
                  f"max {max(times) * 1000:.0f} ms, {steady[0][1]} queries")
            plain = [plain_placement() for _ in range(args.runs)]
            print(f"placement decision alone (jobs.scheduling.placement.schedule): median {statistics.median(plain) * 1000:.0f} ms")
        if args.event_rounds:
            with mock.patch("jobs.channel.notify.request_schedule"):
                modes = {"together": [], "one by one": []}
                for _ in range(args.event_rounds):
                    for mode in modes:
                        modes[mode].append(reason_rewrite_run(mode == "together"))
            together, one_by_one = (statistics.median(modes[m]) for m in ("together", "one by one"))
            print(f"a run that rewrites every waiting reason, live events sent: together median {together * 1000:.0f} ms, "
                  f"one send per event {one_by_one * 1000:.0f} ms ({one_by_one / together:.1f}× longer), "
                  f"{args.event_rounds} round(s) alternating")
    if args.profile:
        pstats.Stats(args.profile).sort_stats("cumulative").print_stats(50)


if __name__ == "__main__":
    main()
