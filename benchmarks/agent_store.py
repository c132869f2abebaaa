"""The console's store of a fleet's first wave: what one daphne does per message. Prints figures.

Run: `.venv/bin/python -m benchmarks.agent_store [--nodes 1000] [--rounds 3]`.
A throw-away PostgreSQL database holds `--nodes` 8-GPU nodes and queued jobs; the real
scheduler run places them, then the messages each node's agent sends at once as it starts its
placements (`preparing`, `running`, its first log lines) and, later, as they end (`exited`), are
stored through the console's own path (jobs.channel.inbox.store_batches) in batches as the
process's store gathers them, timed; and the desired states of those nodes are read as a push
does (jobs.nodes.desired.desired_placements_of).
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

BATCH = 2048  # messages per store call at most (jobs.channel.consumer.STORE_BATCH_MESSAGES); --batch to try others


def populate(nodes: int, jobs: int, seed: int = 7) -> None:
    from django.contrib.auth import get_user_model

    from jobs import actions

    connected_nodes(nodes)
    users = [get_user_model().objects.create(username=f"user{i}") for i in range(4)]
    rng = random.Random(seed)
    for i in range(jobs):
        gpus, count = rng.choice([1, 2, 4, 8]), rng.choice([1, 1, 2])
        actions.create_job(users[i % 4], job_fields(
            f"job-{i}", gpus_per_node=gpus, memory_gb=256 * gpus, node_count=count, shm_size_gb=8,
            image_url="registry/trainer:1", command="sleep 10",
        ), [])


def wave(kind: str) -> list[tuple[int, list[dict], str]]:
    """What every node sends for its current placements: as it starts them, or as they exit."""
    from jobs.models import Placement

    by_node: dict[int, list[dict]] = {}
    for node_id, job_id, number, role in Placement.objects.filter(state__in=["assigned", "preparing", "running"]).values_list(
        "node_id", "attempt__job_id", "attempt__number", "role",
    ).order_by("node_id", "pk"):
        messages = by_node.setdefault(node_id, [])
        base = {"job_id": job_id, "attempt": number, "role": role}
        now = time.time()
        if kind == "start":
            messages += [
                {"type": "attempt", "state": "preparing", **base},
                {"type": "attempt", "state": "running", **base},
                {"type": "logs", "job_id": job_id, "attempt": number, "stream": role,
                 "lines": [[1, now, "[INFO] Starting the command: sleep 10"], [2, now, "training"]]},
            ]
        else:
            messages.append({"type": "attempt", "state": "exited", "exit_code": 0, **base})
    for messages in by_node.values():
        for i, message in enumerate(messages, start=1):
            message["msg_id"] = i if kind == "start" else 100 + i
    return [(node_id, messages, f"bench-{node_id}") for node_id, messages in by_node.items()]


def gathered(batches: list[tuple[int, list[dict], str]], limit: int) -> list[list[tuple[int, list[dict], str]]]:
    calls, current, weight = [], [], 0
    for batch in batches:
        if current and weight + len(batch[1]) > limit:
            calls.append(current)
            current, weight = [], 0
        current.append(batch)
        weight += len(batch[1])
    return [*calls, current] if current else calls


STATEMENTS: dict[str, list[float]] = {}


def timed_statement(execute, sql, params, many, context):
    """--statements: each statement's wall time, by its first words."""
    start = time.perf_counter()
    try:
        return execute(sql, params, many, context)
    finally:
        key = " ".join(sql.split())[:90]
        STATEMENTS.setdefault(key, []).append(time.perf_counter() - start)


def timed_store(batches, profile: cProfile.Profile | None, limit: int, statements: bool = False) -> tuple[float, float, int]:
    from django.db import connection

    from jobs.channel.inbox import store_batches

    calls = gathered(batches, limit)
    messages = sum(len(m) for _, m, _ in batches)
    cpu, wall = time.process_time(), time.perf_counter()
    for call in calls:
        if profile is not None:
            profile.enable()
        with connection.execute_wrapper(timed_statement) if statements else contextlib.nullcontext():
            outcomes = store_batches(call)
        if profile is not None:
            profile.disable()
        assert all(o.stored for node in outcomes for o in node), "a message was refused"
    return time.perf_counter() - wall, time.process_time() - cpu, messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=BATCH, help="messages per store call")
    parser.add_argument("--profile", default="", help="a file: cProfile statistics of the stores")
    parser.add_argument("--statements", action="store_true", help="print each statement's wall time in the stores")
    args = parser.parse_args()
    with BenchDatabase(), mock.patch("jobs.channel.notify.request_schedule"), mock.patch("jobs.channel.notify.publish_node_sync"):
        from jobs.models import Node
        from jobs.nodes import desired
        from jobs.scheduling import scheduler_run

        populate(args.nodes, jobs=2 * args.nodes * args.rounds)  # a full cluster every round
        profile = cProfile.Profile() if args.profile else None
        node_ids = list(Node.objects.order_by("pk").values_list("pk", flat=True))
        figures: dict[str, list[tuple[float, float, int]]] = {"start": [], "exit": [], "desired": []}
        for _ in range(args.rounds):
            scheduler_run.run()
            cpu, wall = time.process_time(), time.perf_counter()
            read = sum(len(placements) for i in range(0, len(node_ids), 500)
                       for placements in desired.desired_placements_of(node_ids[i:i + 500]))
            figures["desired"].append((time.perf_counter() - wall, time.process_time() - cpu, read))
            for kind in ("start", "exit"):
                figures[kind].append(timed_store(wave(kind), profile, args.batch, args.statements))
        for kind, label in (("desired", "desired states read, 500 nodes at a time (placements)"),
                            ("start", "first wave stored (messages)"),
                            ("exit", "exits stored (messages)")):
            walls = [w for w, _, _ in figures[kind]]
            cpus = [c for _, c, _ in figures[kind]]
            count = statistics.mean(n for _, _, n in figures[kind])
            print(f"{label}: {count:.0f} per round; wall median {statistics.median(walls):.3f} s "
                  f"({statistics.median(walls) / count * 1e6:.0f} µs each), CPU {statistics.median(cpus):.3f} s "
                  f"({statistics.median(cpus) / count * 1e6:.0f} µs each)")
        for key, times in sorted(STATEMENTS.items(), key=lambda item: -sum(item[1])):
            print(f"  {sum(times):7.3f} s in {len(times):3d} × {key}")
        if profile is not None:
            profile.dump_stats(args.profile)
            pstats.Stats(args.profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
