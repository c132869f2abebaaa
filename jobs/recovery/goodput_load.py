"""A job's attempts as jobs.recovery.goodput reads them (database reads)."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from monitoring.models import LogLine

from ..choices import TERMINAL_STATUSES
from ..models import JobAttempt, JobStatusChange, TrainingJob
from . import goodput


def attempt_times(job: TrainingJob) -> list[goodput.AttemptTimes]:
    """Every attempt of the job with its checkpoint load (the library's line in the master
    stream): two queries."""
    loads: dict[int, tuple[datetime, float]] = {}
    lines = LogLine.objects.filter(job=job, stream="master", text__contains=goodput.CHECKPOINT_LOADED_MARKER)
    for attempt, ts, text in lines.order_by("attempt", "seq").values_list("attempt", "ts", "text"):
        seconds = goodput.loaded_seconds(text)
        if seconds is not None and attempt not in loads:
            loads[attempt] = (ts, seconds)
    return [
        goodput.AttemptTimes(
            number=a.number, created_at=a.created_at, running_at=a.running_at, ended_at=a.ended_at,
            fault_at=a.fault_at, fault_by=a.fault_by, fault_node=a.fault_node, cause=a.cause,
            resume_checkpoint_at=a.resume_checkpoint_at,
            loaded_at=loads.get(a.number, (None, None))[0], load_seconds=loads.get(a.number, (None, None))[1],
        )
        for a in JobAttempt.objects.filter(job=job).order_by("number")
    ]


def ended_at(job: TrainingJob) -> datetime | None:
    """When the job reached its terminal status (None while it is not in one)."""
    if job.status not in TERMINAL_STATUSES:
        return None
    return JobStatusChange.objects.filter(job=job, new_status=job.status).order_by("-created_at") \
        .values_list("created_at", flat=True).first()


def job_goodput(job: TrainingJob, now: datetime | None = None) -> goodput.Goodput:
    return goodput.goodput(attempt_times(job), now or timezone.now(), ended_at(job))
