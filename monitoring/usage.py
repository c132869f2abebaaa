"""GPU usage and per-job summaries for the service dashboard (plain functions over plain data)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from . import catalog
from .rollup import Stats, period_start

SPARK_PERIOD = 60  # seconds per sparkline point
CURRENT_WINDOW = 300  # "now" on the dashboard: the primary statistic over the last 5 minutes


def gpu_hours(placements: Iterable[tuple[datetime | None, datetime | None, int]], since: datetime, now: datetime) -> float:
    """GPU-hours of (started, ended or None while running, GPU count) placements within [since, now]."""
    total = 0.0
    for started, ended, gpus in placements:
        if started is None:
            continue
        begin, end = max(started, since), min(ended or now, now)
        if end > begin:
            total += gpus * (end - begin).total_seconds() / 3600
    return total


@dataclass
class JobSummary:
    current: dict[str, float] = field(default_factory=dict)  # key metric → primary statistic, last 5 min
    spark: list[tuple[float, float]] = field(default_factory=list)  # (minute, average GPU utilisation)


def summarise(samples: Iterable[tuple[int, str, float, float]], now: float) -> dict[int, JobSummary]:
    """(job id, metric, ts, value) samples → per job: key metrics now and a utilisation sparkline.

    "Now" is each key metric's primary statistic over the last CURRENT_WINDOW seconds, across
    every device of the job (average utilisation, largest memory use, hottest GPU, …).
    """
    current: dict[tuple[int, str], list[float]] = defaultdict(list)
    spark: dict[int, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for job_id, metric, ts, value in samples:
        if ts >= now - CURRENT_WINDOW:
            current[(job_id, metric)].append(value)
        if metric == "GPUUtilization":
            spark[job_id][period_start(ts, SPARK_PERIOD)].append(value)
    summaries: dict[int, JobSummary] = defaultdict(JobSummary)
    for (job_id, metric), values in current.items():
        summaries[job_id].current[metric] = Stats.of(values).value(catalog.METRICS[metric].primary)
    for job_id, minutes in spark.items():
        summaries[job_id].spark = [(t, sum(v) / len(v)) for t, v in sorted(minutes.items())]
    return dict(summaries)
