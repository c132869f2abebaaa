"""Metric data of the monitoring tests (the personas are the root conftest's).

Samples are written through the same code ingestion uses.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from monitoring import metrics_ingest
from monitoring.models import MetricRollup, MetricSeries

NOW = datetime(2025, 3, 10, 12, 0, tzinfo=UTC).timestamp()  # a period boundary (12:00 UTC)


@pytest.fixture(autouse=True)
def fresh_series_cache():
    """Each test's database starts empty: so must ingestion's cache of series ids."""
    metrics_ingest.forget_cached_series()
    metrics_ingest._node_names.clear()
    yield
    metrics_ingest.forget_cached_series()


def store(node: str, samples: list[list], now: float | None = None) -> None:
    """Store [metric, ts, value, dims] samples as if node `node` had sent them."""
    metrics_ingest.store_samples(node, metrics_ingest.parse(samples), now=now)


def gpu_samples(metric: str, job_id: int | None, node: str, gpu: int, points: list[tuple[float, float]]) -> list[list]:
    dims = {"gpu": gpu} if job_id is None else {"gpu": gpu, "job": job_id}
    return [[metric, ts, value, dims] for ts, value in points]


def rollups() -> dict[tuple[str, float], tuple[int, float, float, float]]:
    """Every stored roll-up: (series key, period start) → (count, sum, min, max)."""
    keys = dict(MetricSeries.objects.values_list("id", "key"))
    return {
        (keys[r.series_id], r.period_start.timestamp()): (r.sample_count, r.total, r.minimum, r.maximum)
        for r in MetricRollup.objects.all()
    }


def place(job, node_name: str) -> None:
    """Put the job's first attempt on the node (GPUs 0 and 1): the node may then write its metrics."""
    from jobs import lifecycle
    from jobs.models import Node
    from jobs.scheduling.decision import Assignment

    node = Node.objects.get(name=node_name)
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0, 1))])
