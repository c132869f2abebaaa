"""Where one job's seconds go: every timestamped event of it, console and Slurm, on one time line.

Used by benchmarks.slurm_bench (`--trace`): the job's status changes, its Slurm submission, its
log lines (the launcher's own timestamps), its nodes' exit reports, and what slurmctld, slurmd
and the batch job's output say about it, each in seconds from the API call that created it.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

SLURM_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] (.*)$")
LAUNCHER_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (.*)$")


def _local(text: str, fmt: str) -> float:
    return datetime.strptime(text, fmt).astimezone().timestamp()


def slurm_events(root: Path, slurm_id: int) -> list[tuple[float, str]]:
    """slurmctld's and every slurmd's log lines that name the job, and its batch output."""
    events = []
    wanted = re.compile(rf"(JobId={slurm_id}\b|job {slurm_id}\b|StepId={slurm_id}\.|job_id {slurm_id}\b|\[{slurm_id}\.|{slurm_id}\.batch)")
    for log in sorted((root / "log").glob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            match = SLURM_STAMP.match(line)
            if match and wanted.search(match.group(2)):
                events.append((_local(match.group(1), "%Y-%m-%dT%H:%M:%S.%f"), f"{log.stem}: {match.group(2)[:110]}"))
    out = root / "work" / f"slurm-{slurm_id}.out"
    if out.exists():
        for line in out.read_text(errors="replace").splitlines():
            match = LAUNCHER_STAMP.match(line)
            if match:
                events.append((_local(match.group(1), "%Y-%m-%d %H:%M:%S,%f"), f"launcher: {match.group(2)[:110]}"))
    return events


STARTED = re.compile(r"(?:_start_job: Started|sched: Allocate) JobId=(\d+) ")


def slurm_started(root: Path, slurm_id: int) -> float | None:
    """When slurmctld started the job (its main or backfill scheduler), from its log; None if not found."""
    log = root / "log" / "slurmctld.log"
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        match = SLURM_STAMP.match(line)
        started = STARTED.search(match.group(2)) if match else None
        if match and started and int(started.group(1)) == slurm_id:
            return _local(match.group(1), "%Y-%m-%dT%H:%M:%S.%f")
    return None


def console_events(job_id: int) -> list[tuple[float, str]]:
    from jobs.models import JobStatusChange, Placement
    from jobs.slurm.models import SlurmJob, SlurmRun
    from monitoring.models import LogLine

    events = [(c.created_at.timestamp(), f"status → {c.new_status}: {c.reason[:90]}")
              for c in JobStatusChange.objects.filter(job_id=job_id)]
    events += [(line.ts.timestamp(), f"log {line.stream}: {line.text[:100]}")
               for line in LogLine.objects.filter(job_id=job_id)]
    events += [(p.ended_at.timestamp(), f"{p.role} on {p.node_name}: exit reported ({p.exit_code})")
               for p in Placement.objects.filter(attempt__job_id=job_id, ended_at__isnull=False)]
    for slurm_job in SlurmJob.objects.filter(training_job_id=job_id):
        if slurm_job.submitted_at:
            events.append((slurm_job.submitted_at.timestamp(), f"submitted to Slurm as job {slurm_job.slurm_job_id}"))
    for run in SlurmRun.objects.filter(slurm_job__training_job_id=job_id).select_related("attempt"):
        events.append((run.attempt.created_at.timestamp(), "the console recorded the run (redeemed or polled)"))
    return events


def print_trace(title: str, began: float, events: list[tuple[float, str]]) -> None:
    print(f"\n   {title}")
    for at, text in sorted(events):
        print(f"   {at - began:+8.3f}  {text}")
