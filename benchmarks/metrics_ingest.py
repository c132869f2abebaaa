"""Metrics benchmark: ingestion through daphne, the roll-up of a day, a 7-day chart query.

Prints figures; asserts nothing. Run: `.venv/bin/python -m benchmarks.metrics_ingest [--quick]`.
The target load is 1,000 nodes × 8 GPUs sampled every 10 s: 800 GPU readings a second.

1. Ingestion: N simulated agents speak the real protocol (hello, then `metrics` batches, a
   window of batches in flight, waiting for acks) to a real daphne on PostgreSQL. Each batch is
   one sampling tick of one node as the agent sends it: 8 GPUs × 12 metrics + 8 node metrics
   = 104 samples. Sustained rate = samples acknowledged (stored) per second.
2. Roll-up: one day of samples at 800 samples/s (8,000 series, one sample each per 10 s,
   69 M rows), generated in time order straight into the table; then the 5-minute roll-up
   of that day in one statement, and one routine run (the window a beat run recomputes).
3. A 7-day chart: a job with 8 GPUs and 7 days of 5-minute roll-ups among the 8,000 series;
   the server time of GET /api/v1/training-jobs/{id}/metrics/?…&period=3600.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time

os.environ.setdefault("BENCH_DATABASE", "simpleai_metrics_bench")
os.environ.setdefault("BENCH_REDIS_URL", "redis://127.0.0.1:6379/8")

from benchmarks._stack import BenchStack, agent_hello, agent_socket, job_fields, percentile, run_on_bench_nodes

WINDOW = 4  # batches in flight per agent
GPU_METRICS = 12
SERIES = 8000  # 1,000 nodes × 8 GPUs
DAY = 86_400


def setup(agents: int) -> tuple[list[str], int]:
    from django.contrib.auth import get_user_model

    from jobs import actions
    from jobs.models import NodeToken

    user = get_user_model().objects.create_user("bench", password="bench-pass-123")
    job = actions.create_job(user, job_fields("metrics-bench"), [])
    # a node sends training and GPU metrics only of jobs it runs: every bench node holds a
    # placement of the job (node 0 its master), as a job of `agents` nodes would
    run_on_bench_nodes(job, [[role_of(i)] for i in range(agents)], gpus=8)
    return [NodeToken.mint(f"bench-node-{i}")[1] for i in range(agents)], job.pk


def role_of(index: int) -> str:
    return "master" if index == 0 else f"worker-{index}"


def tick(index: int, ts: float, job_id: int) -> list[list]:
    """One sampling tick of a node, as nodeagent.metrics.MetricsCollector sends it."""
    from nodeagent.gpu_metrics import GPU_METRICS as NAMES
    from nodeagent.node_stats import NODE_METRICS

    samples = [[name, ts, 50.0 + gpu, {"gpu": gpu, "job": job_id}] for gpu in range(8) for name in NAMES]
    return samples + [[name, ts, 12.5, {}] for name in NODE_METRICS]


async def fake_agent(url: str, token: str, index: int, job_id: int, batches: int, start: asyncio.Event) -> int:
    async with agent_socket(url, token) as ws:
        running = [{"job_id": job_id, "attempt": 1, "role": role_of(index)}]
        await ws.send(agent_hello(f"bench-node-{index}", running))
        await start.wait()
        in_flight = acked = sent = samples = 0
        last = 0.0
        while acked < batches:
            while sent < batches and in_flight < WINDOW:
                ts = max(round(time.time(), 3), last + 0.001)  # fresh samples, one tick per instant
                last = ts
                batch = tick(index, ts, job_id)
                samples += len(batch)
                sent += 1
                in_flight += 1
                await ws.send(json.dumps({"type": "metrics", "msg_id": sent, "samples": batch}))
            message = json.loads(await ws.recv())
            if message["type"] == "ack":
                in_flight -= message["upto"] - acked
                acked = message["upto"]
        return samples


async def ingest(url: str, tokens: list[str], job_id: int, batches: int) -> tuple[float, int]:
    start = asyncio.Event()
    tasks = [asyncio.create_task(fake_agent(url, token, i, job_id, batches, start)) for i, token in enumerate(tokens)]
    await asyncio.sleep(2.0)  # every agent has said hello
    began = time.perf_counter()
    start.set()
    samples = sum(await asyncio.gather(*tasks))
    return time.perf_counter() - began, samples


def raw_insert_ceiling(rows: int) -> float:
    """The console's own INSERT … unnest … ON CONFLICT, 104 rows a statement, one connection."""
    from django.db import connection, transaction

    from monitoring.metrics_ingest import _SAMPLES_SQL
    from monitoring.models import MetricSeries

    ids = list(MetricSeries.objects.values_list("id", flat=True)[:104])
    base = time.time() + 10 * DAY  # clear of everything else in the table
    began = time.perf_counter()
    for i in range(rows // len(ids)):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_SAMPLES_SQL, [ids, [base + i] * len(ids), [1.0] * len(ids)])
    return (rows // len(ids)) * len(ids) / (time.perf_counter() - began)


def generate_day(day_start: float, hours: int, job_id: int) -> int:
    """8,000 series × one sample per 10 s, in time order (as they arrive), straight in with SQL."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("""
            INSERT INTO monitoring_metricseries (key, namespace, metric, job_id, node, gpu, stream)
            SELECT 'SimpleAITraining/GPUUtilization|job=' || (CASE WHEN n = 0 THEN %s::text ELSE '' END)
                   || '|node=day-' || n || '|gpu=' || g || '|stream=',
                   'SimpleAITraining', 'GPUUtilization', CASE WHEN n = 0 THEN %s END, 'day-' || n, g, ''
            FROM generate_series(0, 999) n, generate_series(0, 7) g
        """, [job_id, job_id])
        # generating, not measuring: the primary key is built after the load (as a bulk load
        # would) and the foreign-key trigger is skipped; BRIN keeps the time order
        cursor.execute("ALTER TABLE monitoring_metricsample DROP CONSTRAINT monitoring_metricsample_pkey")
        cursor.execute("SET session_replication_role = replica")
        rows = 0
        for hour in range(hours):
            cursor.execute("""
                INSERT INTO monitoring_metricsample (series_id, ts, value)
                SELECT s.id, to_timestamp(%s + t * 10 + (s.id %% 10)), (s.id * 7 + t) %% 101
                FROM generate_series(%s, %s) t,
                     LATERAL (SELECT id FROM monitoring_metricseries WHERE node LIKE 'day-%%') s
            """, [day_start, hour * 360, hour * 360 + 359])
            rows += cursor.rowcount
            print(f"\r  generating the day: hour {hour + 1}/{hours}", end="", flush=True)
        print()
        cursor.execute("SET session_replication_role = DEFAULT")
        cursor.execute("ALTER TABLE monitoring_metricsample ADD CONSTRAINT monitoring_metricsample_pkey PRIMARY KEY (series_id, ts) INCLUDE (value)")
        cursor.execute("VACUUM ANALYZE monitoring_metricsample")
        return rows


def generate_week_of_rollups(first: float, last: float) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")  # generating: no foreign-key trigger
        cursor.execute("""
            INSERT INTO monitoring_metricrollup (series_id, period_start, sample_count, total, minimum, maximum)
            SELECT s.id, to_timestamp(p), 30, 1500 + (s.id %% 30), 10, 90
            FROM generate_series(%s::bigint, %s::bigint, 300) p,
                 LATERAL (SELECT id FROM monitoring_metricseries WHERE node LIKE 'day-%%') s
            ON CONFLICT DO NOTHING
        """, [int(first), int(last)])
        cursor.execute("SET session_replication_role = DEFAULT")
        cursor.execute("VACUUM ANALYZE monitoring_metricrollup")
        cursor.execute("SELECT count(*) FROM monitoring_metricrollup")
        return cursor.fetchone()[0]


def chart_query(job_id: int, owner: str, repeat: int) -> tuple[list[float], int]:
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(get_user_model().objects.get(username=owner))
    end = time.time()
    params = {"metric": "GPUUtilization", "start": end - 7 * DAY, "end": end, "period": 3600}
    times, points = [], 0
    for _ in range(repeat):
        began = time.perf_counter()
        response = client.get(f"/api/v1/training-jobs/{job_id}/metrics/", params)
        times.append(time.perf_counter() - began)
        assert response.status_code == 200, response.content
        body = response.json()
        points = sum(len(s["points"]) for s in body["series"])
    return times, points


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer batches and one hour instead of a day")
    parser.add_argument("--agents", type=int, default=50)
    args = parser.parse_args()
    batches = 20 if args.quick else 60
    hours = 1 if args.quick else 24
    with BenchStack(with_workers=False) as stack:
        tokens, job_id = setup(args.agents)
        seconds, sent = asyncio.run(ingest(stack.url, tokens, job_id, batches))
        from monitoring import rollup_runs
        from monitoring.models import MetricSample

        stored = MetricSample.objects.count()
        ceiling = raw_insert_ceiling(20_800)
        rate = sent / seconds
        print("\nMetrics ingestion (agents → daphne → PostgreSQL), one run, this machine")
        print(f"  agents: {args.agents}, {batches} batches each of {len(tick(0, 0.0, job_id))} samples (one node tick), window {WINDOW}")
        print(f"  samples sent: {sent:,}; rows stored: {stored:,}")
        print(f"  sustained:        {rate:>10,.0f} samples/s  = {rate / 800:.1f}× the 800 samples/s target; "
              f"{args.agents * batches / seconds:,.0f} node ticks/s (1,000 nodes need 100/s)")
        print(f"  raw INSERT (1 conn, same statement): {ceiling:>10,.0f} rows/s   pipeline = {rate / ceiling:.0%} of it")

        # the generated day ends an hour ago: clear of the samples the ingestion run stored
        day_start = (time.time() - hours * 3600 - 3600) // 300 * 300
        rows = generate_day(day_start, hours, job_id)
        began = time.perf_counter()
        written = rollup_runs.roll_range(day_start, day_start + hours * 3600)
        roll_seconds = time.perf_counter() - began
        # what a beat run recomputes at this load: LATE_MARGIN before the last run, up to the open period
        middle = day_start + hours * 1800
        began = time.perf_counter()
        rollup_runs.roll_range(middle - 1200, middle + 300)
        routine = time.perf_counter() - began
        print(f"\nRoll-up of {hours} h at 800 samples/s ({rows:,} samples, {SERIES:,} series)")
        print(f"  one statement:    {roll_seconds:>8.1f} s  ({rows / roll_seconds:,.0f} samples/s; {written:,} roll-up rows)")
        print(f"  a routine run (the last 20 min + the open period): {routine * 1000:,.0f} ms")

        total = generate_week_of_rollups(day_start - 6 * DAY - (24 - hours) * 3600, day_start - 300)
        times, points = chart_query(job_id, "bench", 30)
        print(f"\n7-day chart of a job's 8 GPUs from roll-ups ({total:,} roll-up rows in the table)")
        print(f"  server time: p50 {statistics.median(times) * 1000:.0f} ms, p90 {percentile(times, 90) * 1000:.0f} ms, "
              f"max {max(times) * 1000:.0f} ms ({points} points, period 1 h)")


if __name__ == "__main__":
    main()
