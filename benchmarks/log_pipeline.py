"""Log pipeline benchmark: agents → daphne → PostgreSQL, and agent → browser latency.

Prints figures; asserts nothing. Run: `.venv/bin/python -m benchmarks.log_pipeline [--quick]`.

1. Throughput: N simulated agents speak the real agent protocol (hello, then `logs` batches,
   waiting for the console's acks with a window of batches in flight) to a real daphne; we
   time until every line is acknowledged (= stored) and count the rows.
2. The database's own ceiling in the same run: the same rows inserted straight into the same
   table from one connection, with the console's own statement (INSERT … SELECT unnest(…)
   ON CONFLICT DO NOTHING, 500 rows a statement) and with COPY.
3. Latency: one agent sends 2,000 lines/s in 50 ms batches while a browser client watches the
   job's Logs WebSocket; latency = receive time − the time the line was produced.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from benchmarks._stack import BenchStack, agent_hello, agent_socket, job_fields, percentile, run_on_bench_nodes

BATCH = 500
WINDOW = 8


def setup_job(agents: int):
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from jobs import actions
    from jobs.models import NodeToken

    user = get_user_model().objects.create_user("bench", password="bench-pass-123")
    job = actions.create_job(user, job_fields("log-bench"), [])
    # the benchmark feeds attempt 1 itself, no scheduler involved: bench-node-i runs worker-i,
    # node 0 also master (the latency probe)
    run_on_bench_nodes(job, [[f"worker-{i}", *(["master"] if i == 0 else [])] for i in range(agents)], gpus=0)
    tokens = [NodeToken.mint(f"bench-node-{i}")[1] for i in range(agents)]
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.save()
    return job.pk, tokens, session.session_key


async def fake_agent(url: str, token: str, index: int, job_id: int, batches: int, start: asyncio.Event) -> int:
    async with agent_socket(url, token) as ws:
        roles = [f"worker-{index}", *(["master"] if index == 0 else [])]
        running = [{"job_id": job_id, "attempt": 1, "role": role} for role in roles]
        await ws.send(agent_hello(f"bench-node-{index}", running))
        await start.wait()
        in_flight, acked, sent, seq = 0, 0, 0, 1  # line seqs start at 1 (the protocol's range)
        while acked < batches:
            while sent < batches and in_flight < WINDOW:
                now = time.time()
                lines = [[seq + i, now, f"step {seq + i} loss 0.{seq + i:06d} node {index}"] for i in range(BATCH)]
                seq += BATCH
                sent += 1
                in_flight += 1
                await ws.send(json.dumps({"type": "logs", "msg_id": sent, "job_id": job_id, "attempt": 1, "stream": f"worker-{index}", "lines": lines}))
            message = json.loads(await ws.recv())
            if message["type"] == "ack":
                newly = message["upto"] - acked
                acked, in_flight = message["upto"], in_flight - newly
        return seq - 1


async def throughput(url: str, tokens: list[str], job_id: int, batches: int) -> tuple[float, int]:
    start = asyncio.Event()
    tasks = [asyncio.create_task(fake_agent(url, t, i, job_id, batches, start)) for i, t in enumerate(tokens)]
    await asyncio.sleep(1.0)  # every agent has said hello
    began = time.perf_counter()
    start.set()
    lines = sum(await asyncio.gather(*tasks))
    return time.perf_counter() - began, lines


async def latency(url: str, token: str, job_id: int, session_key: str, seconds: float, rate: int) -> list[float]:
    from websockets.asyncio.client import connect

    received: list[float] = []
    headers = {"Cookie": f"sessionid={session_key}", "Origin": url}
    async with connect(url.replace("http", "ws") + f"/ws/jobs/{job_id}/logs/", additional_headers=headers, max_size=2**26) as browser:
        await browser.recv()  # backlog

        async def watch():
            while True:
                event = json.loads(await browser.recv())
                now = time.time()
                if event.get("type") == "log.append":
                    received.extend(now - line["ts"] for line in event["lines"] if line["stream"] == "master")

        watcher = asyncio.create_task(watch())
        async with agent_socket(url, token, max_size=2**20) as agent:
            running = [{"job_id": job_id, "attempt": 1, "role": role} for role in ("worker-0", "master")]
            await agent.send(agent_hello("bench-node-0", running, gpus=0))
            per_batch, interval = rate // 20, 0.05
            seq, msg_id, next_at = 1, 0, time.perf_counter()
            end = next_at + seconds
            while time.perf_counter() < end:
                # each line is stamped when it is "printed": spread over the 50 ms batch window
                base = time.time() - interval
                lines = [[seq + i, base + interval * i / per_batch, f"latency probe {seq + i}"] for i in range(per_batch)]
                seq += per_batch
                msg_id += 1
                await agent.send(json.dumps({"type": "logs", "msg_id": msg_id, "job_id": job_id, "attempt": 1, "stream": "master", "lines": lines}))
                next_at += interval
                await asyncio.sleep(max(0, next_at - time.perf_counter()))
            await asyncio.sleep(1.0)
        watcher.cancel()
    return received


def raw_ceiling(job_id: int, rows: int) -> tuple[float, float]:
    """The same table, the same rows, straight from psycopg: batched INSERT and COPY."""
    from datetime import UTC, datetime

    from django.db import connection

    from jobs.sql.bulk import rows_param
    from monitoring.ingest import _INSERT_SQL

    now = datetime.now(tz=UTC)
    data = [(job_id, "raw", 1, i, now, f"step {i} loss 0.{i:06d} node raw") for i in range(rows)]
    stamp = now.timestamp()
    with connection.cursor() as cursor:
        began = time.perf_counter()
        for start in range(0, rows, BATCH):
            chunk = range(start, min(rows, start + BATCH))
            cursor.execute(_INSERT_SQL, [job_id, "raw", 1, rows_param([list(chunk), [stamp] * len(chunk), [data[i][5] for i in chunk]])])
        insert_rate = rows / (time.perf_counter() - began)
        cursor.execute("DELETE FROM monitoring_logline WHERE stream = 'raw'")
        raw = cursor.connection
        began = time.perf_counter()
        with raw.cursor() as pg, pg.copy("COPY monitoring_logline (job_id, stream, attempt, seq, ts, text) FROM STDIN") as copy:
            for row in data:
                copy.write_row(row)
        copy_rate = rows / (time.perf_counter() - began)
    return insert_rate, copy_rate


def trigger_cost(job_id: int, rows: int, rounds: int = 3) -> dict[str, float]:
    """The console's statement under each version of the commit-order trigger, alternated in one
    run: the current one (migration monitoring/0006: the job's row, then the stream's lock), the
    one before it (0005: the stream's lock only) and none; returns the median rows/s of each."""
    import importlib

    from django.db import connection

    from jobs.sql.bulk import rows_param
    from monitoring.ingest import _INSERT_SQL

    trigger = importlib.import_module("monitoring.migrations.0006_logline_lock_order")
    bodies = {"0006 row, then stream": trigger.LOCK_ROW_THEN_STREAM, "0005 stream only": trigger.STREAM_ONLY, "no trigger": None}
    stamp = time.time()
    rates: dict[str, list[float]] = {name: [] for name in bodies}
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence('monitoring_logline', 'id')")
        sequence = cursor.fetchone()[0]
        for round_ in range(rounds):
            names = list(bodies)[round_ % 3:] + list(bodies)[:round_ % 3]  # rotate the order
            for name in names:
                body = bodies[name]
                if body is not None:
                    cursor.execute(body.format(sequence=sequence))
                cursor.execute(f"ALTER TABLE monitoring_logline {'DISABLE' if body is None else 'ENABLE'} TRIGGER logline_in_commit_order")
                stream = f"trigger-{round_}-{name}"
                began = time.perf_counter()
                for start in range(0, rows, BATCH):
                    chunk = list(range(start, min(rows, start + BATCH)))
                    cursor.execute(_INSERT_SQL, [job_id, stream, 1, rows_param([chunk, [stamp] * len(chunk), [f"step {i} loss 0.{i:06d}" for i in chunk]])])
                rates[name].append(rows / (time.perf_counter() - began))
        cursor.execute(trigger.LOCK_ROW_THEN_STREAM.format(sequence=sequence))
        cursor.execute("ALTER TABLE monitoring_logline ENABLE TRIGGER logline_in_commit_order")
    return {name: sorted(values)[rounds // 2] for name, values in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--agents", type=int, default=4)
    args = parser.parse_args()
    batches = 40 if args.quick else 100
    with BenchStack(with_workers=False) as stack:
        job_id, tokens, session_key = setup_job(args.agents)
        from monitoring.models import LogLine

        seconds, lines = asyncio.run(throughput(stack.url, tokens, job_id, batches))
        stored = LogLine.objects.filter(job_id=job_id).count()
        rate = lines / seconds
        insert_rate, copy_rate = raw_ceiling(job_id, lines)
        triggers = trigger_cost(job_id, 20_000 if args.quick else 50_000)
        samples = asyncio.run(latency(stack.url, tokens[0], job_id, session_key, 5 if args.quick else 15, 2000))
    print("\nLog pipeline (agents → daphne → PostgreSQL), one run, this machine")
    print(f"  agents: {args.agents}, batch {BATCH} lines, window {WINDOW} batches")
    print(f"  lines sent: {lines:,}; rows stored: {stored:,}")
    print(f"  pipeline:           {rate:>10,.0f} lines/s  ({seconds:.2f} s)")
    print(f"  raw INSERT (1 conn):  {insert_rate:>10,.0f} rows/s   pipeline = {rate / insert_rate:.0%} of it")
    print(f"  raw COPY (1 conn):   {copy_rate:>10,.0f} rows/s   pipeline = {rate / copy_rate:.0%} of it")
    bare = triggers["no trigger"]
    print("  raw INSERT under each commit-order trigger (alternated, medians of 3):")
    for name, rows_per_second in triggers.items():
        print(f"    {name:<22} {rows_per_second:>10,.0f} rows/s = {rows_per_second / bare:.0%} of no trigger")
    print(f"  agent → browser latency at 2,000 lines/s: p50 {percentile(samples, 50) * 1000:.0f} ms, "
          f"p99 {percentile(samples, 99) * 1000:.0f} ms ({len(samples):,} lines received)")


if __name__ == "__main__":
    main()
