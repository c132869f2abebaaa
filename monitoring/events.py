"""Live events of the monitoring app (payload types, group names)."""

from __future__ import annotations

from typing import Any, Literal, TypedDict


class LogLinesEvent(TypedDict):
    type: Literal["log.lines"]
    stream: str
    attempt: int
    lines: list[list[Any]]  # [seq, ts (unix seconds), text]


def logs_group(job_id: int) -> str:
    return f"job-{job_id}-logs"


class MetricsEvent(TypedDict):
    """New samples of a job, to group `job-<id>` (jobs.consumers.JobConsumer.job_metrics)."""

    type: Literal["job.metrics"]
    job_id: int
    samples: list[list[Any]]  # [metric, ts (unix seconds), value, {"node", "gpu"} or {"stream"}]
