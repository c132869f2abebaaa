"""`simpleai run` and following a job to its end (`run --follow`, `logs -f`)."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from simpleai import jobfile, project
from simpleai.api_types import Job, JobFields
from simpleai.client import Client
from simpleai.defaults import fill_defaults
from simpleai.errors import NotFound, UsageError
from simpleai.follow import Follower

from .context import Context
from .output import shape


def flags_of(args: argparse.Namespace, command: list[str] | None) -> JobFields:
    """The job fields the flags set (none for a flag not given)."""
    flags: JobFields = {}
    pairs = (("name", args.name), ("server_type", args.server_type), ("gpus_per_node", args.gpus),
             ("node_count", args.nodes), ("image_url", args.image), ("failover_enabled", args.failover),
             ("spot_fallback_after_minutes", getattr(args, "spot_fallback_after", None)),
             ("time_limit_minutes", getattr(args, "time_limit", None)))
    flags.update((field, value) for field, value in pairs if value is not None)
    if args.spot is not None:
        flags["learning_type"] = "spot" if args.spot else "on_demand"
    if args.framework:
        framework, _, version = args.framework.partition(":")
        flags.update(framework=framework, framework_version=version)  # no version: the newest offered
    if args.tag:
        flags["tags"] = jobfile.parse_tags(args.tag)
    if args.workdir is not None:
        flags["workdir"] = jobfile.local_path(args.workdir, None)
    if args.input:
        flags["inputs"] = jobfile.parse_inputs(args.input)
    if args.from_checkpoint is not None:
        flags["from_checkpoint"] = args.from_checkpoint
    if command is not None:
        if not command:
            raise UsageError("nothing after `--`: give the command to run, e.g. -- python train.py")
        flags["command"] = jobfile.command_from_argv(command)
    return flags


def job_fields(args: argparse.Namespace, command: list[str] | None, ctx: Context) -> JobFields:
    file = jobfile.load(Path(args.job_file)) if args.job_file else {}
    fields = jobfile.merge(file, flags_of(args, command))
    return fill_defaults(fields, ctx.now(), ctx.client().server_types)


def run(args: argparse.Namespace, ctx: Context, command: list[str] | None) -> int:
    fields = job_fields(args, command, ctx)
    # the project and the local inputs are read before anything is sent (a missing path, a
    # project over the cap: status 2, nothing uploaded)
    local = project.local_checks(fields, ctx.env)
    client = ctx.client()
    local.fields = project.resolve_checkpoint(local.fields, client)
    # one validation, the console's: a job it refuses uploads nothing. What is still to upload
    # is checked by the create (the console checks that the objects exist).
    draft = client.validate_job(local.fields)
    fields = project.upload(local, client, ctx.err, ctx.note, dry_run=args.dry_run, env=ctx.env)
    if args.dry_run:
        draft.update((key, fields[key]) for key in ("workdir_url", "inputs") if key in fields)
        ctx.print(yaml.safe_dump(draft, sort_keys=False, allow_unicode=True).rstrip())
        return 0
    job = client.create_job(fields)
    ctx.print(str(job["id"]))
    ctx.out.flush()
    ctx.note(f"job {job['id']} ({job['name']}) is {job['status']} on {shape(job)}; "
             f"its logs: simpleai logs {job['id']} -f")
    return follow_to_end(ctx, client, job) if args.follow else 0


def follow_to_end(ctx: Context, client: Client, job: Job, stream: str | None = None, as_json: bool = False) -> int:
    """Print the job's lines until it ends: 0 when it completed, 1 otherwise (or when it was deleted)."""
    follower = Follower(client, job["id"], ctx.out, ctx.err, stream=stream,
                        prefix=job["node_count"] > 1 and not stream, as_json=as_json)
    try:
        ended = follower.until_ended()
    except NotFound:
        ctx.note(f"job {job['id']} was deleted")
        return 1
    except KeyboardInterrupt:  # Ctrl-C stops the following, not the job
        ctx.note(f"stopped following; job {job['id']} goes on (`simpleai cancel {job['id']}` stops it)")
        return 130
    reason = f": {ended['status_reason']}" if ended["status_reason"] else ""
    ctx.note(f"job {ended['id']} ({ended['name']}) {ended['status']}{reason}")
    return 0 if ended["status"] == "Completed" else 1
