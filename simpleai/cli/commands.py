"""The commands other than `run`: login, ls, status, logs, cancel, rm, tag, metrics, export, server-types."""

from __future__ import annotations

import argparse
import getpass
import time
from datetime import datetime
from pathlib import Path

from simpleai import jobfile, summary
from simpleai.api_types import Job, MetricResult
from simpleai.client import ENDED_STATUSES, Client
from simpleai.config import Config, config_path, normalise_url, save
from simpleai.errors import ApiError, SimpleAIError, UsageError
from simpleai.follow import Follower
from simpleai.packing import human
from simpleai.storage import Storage

from .context import Context
from .output import job_text, jobs_table, server_types_table, table, tags_text
from .run import follow_to_end


def login(args: argparse.Namespace, ctx: Context) -> int:
    url = normalise_url(args.url)
    if args.token_stdin:
        token = ctx.stdin.readline().strip()
    else:
        token = getpass.getpass(f"API token (from {url}/account/token/): ").strip()
    if not token:
        raise UsageError("no token given")
    Client(url, token).server_types()  # the console accepts it, or this raises with why
    path = save(Config(url, token), config_path(ctx.env))
    ctx.note(f"logged in to {url}; the token is in {path} (readable by you only)")
    overriding = [name for name in ("SIMPLEAI_URL", "SIMPLEAI_TOKEN") if ctx.env.get(name)]
    if overriding:
        ctx.note(f"{' and '.join(overriding)} in your environment win over that file")
    return 0


def ls(args: argparse.Namespace, ctx: Context) -> int:
    jobs = ctx.client().jobs(status=args.status, search=args.search, limit=args.limit)
    if args.json:
        ctx.print_json(jobs)
    elif jobs:
        ctx.print(jobs_table(jobs))
    else:
        ctx.note("no jobs")
    return 0


def status(args: argparse.Namespace, ctx: Context) -> int:
    job = ctx.client().find_job(args.job)
    if args.json:
        ctx.print_json(job)
    else:
        ctx.print(job_text(job))
    return 0


def logs(args: argparse.Namespace, ctx: Context) -> int:
    client = ctx.client()
    job = client.find_job(args.job)
    if args.follow:
        return follow_to_end(ctx, client, job, stream=args.role, as_json=args.json)
    Follower(client, job["id"], ctx.out, ctx.err, stream=args.role, prefix=job["node_count"] > 1 and not args.role,
             as_json=args.json).print_all()
    return 0


def cancel(args: argparse.Namespace, ctx: Context) -> int:
    client = ctx.client()
    job = client.stop_job(client.find_job(args.job)["id"])
    ctx.note(f"job {job['id']} ({job['name']}) is {job['status']}: its processes are being stopped")
    return 0


def rm(args: argparse.Namespace, ctx: Context) -> int:
    client = ctx.client()
    job = client.find_job(args.job)
    left = client.delete_job(job["id"])
    if left is None:
        ctx.note(f"deleted job {job['id']} ({job['name']})")
    else:
        ctx.note(f"job {job['id']} ({job['name']}) is {left['status']}: it goes once its nodes have stopped it")
    return 0


def tag(args: argparse.Namespace, ctx: Context) -> int:
    if not args.tags and not args.remove:
        raise UsageError("give tags to set (K=V) or to remove (--remove K)")
    client = ctx.client()
    job = client.find_job(args.job)
    # read, change, write: the API replaces the whole set (a concurrent edit of the same job's
    # tags between the two calls is overwritten, as with two tabs of its page)
    tags = [t for t in jobfile.merge_tags(job["tags"], jobfile.parse_tags(args.tags)) if t["key"] not in args.remove]
    job = client.set_tags(job["id"], tags)
    ctx.print(tags_text(job["tags"]))
    return 0


def export(args: argparse.Namespace, ctx: Context) -> int:
    ctx.out.write(jobfile.export_text(ctx.client().find_job(args.job)))
    return 0


def download(args: argparse.Namespace, ctx: Context) -> int:
    client = ctx.client()
    job = client.find_job(args.job)
    if "result_url" not in job:
        raise SimpleAIError(f"the console does not say where job {job['id']}'s results are: it is older than "
                            "`simpleai download`")
    url = job["result_url"]
    if not url:
        raise SimpleAIError(f"job {job['id']} ({job['name']}) has no results: it has not started yet ({job['status']})")
    to = Path(args.to) if args.to else Path(job["name"])
    files, size, seconds = Storage(client.storage_space()).download_prefix(url, to, ctx.err)
    if not files:
        state = "it has not ended yet" if job["status"] not in ENDED_STATUSES else "it wrote nothing to $OUTPUT_DIR"
        raise SimpleAIError(f"job {job['id']} ({job['name']}) has no results at {url}: {state}")
    ctx.note(f"downloaded {files} file{'s' if files != 1 else ''} ({human(size)}) of job {job['id']} "
             f"({job['name']}) to {to} in {seconds:.1f} s")
    return 0


def server_types(args: argparse.Namespace, ctx: Context) -> int:
    types = ctx.client().server_types()
    if args.json:
        ctx.print_json(types)
    else:
        ctx.print(server_types_table(types))
    return 0


def metrics(args: argparse.Namespace, ctx: Context) -> int:
    client = ctx.client()
    job = client.find_job(args.job)
    start, end = job_span(job)
    rows = [row for metric in summary.METRICS for row in summary.rows(metric_result(client, job["id"], metric, start, end))]
    if args.json:
        ctx.print_json([row.as_dict() for row in rows])
    elif rows:
        ctx.print(table(("METRIC", "SERIES", "LAST", "MIN", "MAX", "MEAN", "UNIT"), [
            (r.metric, r.series, summary.number(r.last), summary.number(r.low), summary.number(r.high),
             summary.number(r.mean), "" if r.unit == "None" else r.unit) for r in rows
        ]))
    else:
        ctx.note(f"no metrics recorded for job {job['id']} ({job['name']})")
    return 0


def job_span(job: Job) -> tuple[float, float]:
    """From its creation to its last status change when it has ended, else to now (unix seconds)."""
    start = datetime.fromisoformat(job["created_at"]).timestamp()
    end = time.time()
    if job["status"] in ENDED_STATUSES and job["history"]:
        end = datetime.fromisoformat(job["history"][-1]["created_at"]).timestamp() + 60
    return start, max(end, start + 1)


def metric_result(client: Client, job_id: int, metric: str, start: float, end: float) -> MetricResult:
    span = (summary.iso(start), summary.iso(end))
    try:
        return client.metric(job_id, metric, start=span[0], end=span[1], period=summary.period_for(end - start))
    except ApiError as error:
        if "period" not in error.fields:
            raise
        # older than the raw retention: the console reads 5-minute statistics
        return client.metric(job_id, metric, start=span[0], end=span[1], period=summary.period_for(end - start, rollup=True))
