"""Storing `metrics` batches from agents, once each, and fanning job samples out to browsers.

A sample becomes a row (series, ts, value); the series row (metric + dimensions) is found or
created first and its id cached in this process. Re-sent samples hit the primary key
(series, ts) and are ignored. A sample older than the roll-up window marks its 5-minute
period dirty in the same transaction (see monitoring.rollup), so it is never left out of
the statistics.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import F

from console.lib import live
from jobs.channel.writes import RefusedWrite, metric_jobs
from jobs.events import job_group
from jobs.models import Node

from . import catalog
from .events import MetricsEvent
from .models import MetricSample, MetricSeries, RollupDirtyPeriod
from .rollup import is_late, period_start

log = logging.getLogger(__name__)
MAX_SERIES_CACHE = 500_000  # ~100 MB at most; a fleet of 1,000 nodes has ~100k series


@dataclass(frozen=True)
class Sample:
    metric: str
    ts: float
    value: float
    job_id: int | None
    gpu: int | None
    stream: str

    def key(self, node: str) -> str:
        return MetricSeries.make_key(catalog.NAMESPACE, self.metric, self.job_id, node, self.gpu, self.stream)


def parse(raw_samples: object) -> list[Sample]:
    """Valid samples of a batch; malformed ones are dropped (an agent re-sending them forever
    would help no one), with one warning per batch."""
    if not isinstance(raw_samples, list):
        log.warning("ignored a metrics batch without a sample list")
        return []
    samples, dropped = [], 0
    for raw in raw_samples:
        sample = _parse_one(raw)
        if sample is None:
            dropped += 1
        else:
            samples.append(sample)
    if dropped:
        log.warning("ignored %d malformed or unknown metric samples", dropped)
    return samples


def _parse_one(raw: object) -> Sample | None:
    if not isinstance(raw, list | tuple) or len(raw) != 4 or not isinstance(raw[3], dict):
        return None
    name, ts, value, dims = raw
    metric = catalog.METRICS.get(name) if isinstance(name, str) else None
    if metric is None or not _number(ts) or not _number(value):
        return None
    gpu, job, stream = dims.get("gpu"), dims.get("job"), dims.get("stream", "")
    if (gpu is not None and not _small_int(gpu)) or (job is not None and not _small_int(job, 2**62)):
        return None
    if not isinstance(stream, str) or len(stream) > 32:
        return None
    # the scope says which dimensions a metric has: anything else is a malformed sample
    if metric.scope == catalog.Scope.GPU and gpu is None:
        return None
    if metric.scope == catalog.Scope.TRAINING and (job is None or not stream):
        return None
    if metric.scope == catalog.Scope.NODE:
        gpu, job, stream = None, None, ""
    return Sample(metric.name, float(ts), float(value), job, gpu, stream if metric.scope == catalog.Scope.TRAINING else "")


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _small_int(value: object, limit: int = 32767) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= limit


# -- node names and series ids (cached: both are looked up for every batch) -------------------
_node_names: dict[int, str] = {}
_series_ids: dict[str, int] = {}


def node_name(node_id: int) -> str:
    if node_id not in _node_names:
        _node_names[node_id] = Node.objects.filter(pk=node_id).values_list("name", flat=True).first() or f"node-{node_id}"
    return _node_names[node_id]


def forget_cached_series() -> None:
    """After series were deleted (retention): ingestion looks them up again."""
    _series_ids.clear()


def _series_ids_for(node: str, samples: Iterable[Sample]) -> dict[str, int]:
    """Series id of each sample's key, creating the missing series.

    The answer is built locally: the shared cache may be cleared at any moment by another
    agent thread (retention's retry) or by its own size cap, and must not lose a key mid-batch."""
    wanted = {s.key(node): s for s in samples}
    ids = {key: _series_ids[key] for key in wanted if key in _series_ids}
    missing = [key for key in wanted if key not in ids]
    if missing:
        rows = [wanted[key] for key in missing]
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(_SERIES_SQL, [
                    missing, [catalog.NAMESPACE] * len(rows), [s.metric for s in rows], [s.job_id for s in rows],
                    [node] * len(rows), [s.gpu for s in rows], [s.stream for s in rows],
                ])
        else:
            MetricSeries.objects.bulk_create([
                MetricSeries(key=key, namespace=catalog.NAMESPACE, metric=s.metric, job_id=s.job_id, node=node,
                             gpu=s.gpu, stream=s.stream)
                for key, s in zip(missing, rows, strict=True)
            ], ignore_conflicts=True)
        found = dict(MetricSeries.objects.filter(key__in=missing).values_list("key", "id"))
        if len(found) < len(missing):
            # deleted by retention between the insert and the read: store_samples tries again
            raise IntegrityError("a metric series was removed while its samples were stored")
        if len(_series_ids) + len(found) > MAX_SERIES_CACHE:
            _series_ids.clear()
        _series_ids.update(found)
        ids.update(found)
    return ids


_SERIES_SQL = f"""
    INSERT INTO {MetricSeries._meta.db_table} (key, namespace, metric, job_id, node, gpu, stream)
    SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::bigint[], %s::text[], %s::smallint[], %s::text[])
    ON CONFLICT (key) DO NOTHING
"""
# three arrays instead of 3 × N placeholders: one short statement to parse, whatever the batch
_SAMPLES_SQL = f"""
    INSERT INTO {MetricSample._meta.db_table} (series_id, ts, value)
    SELECT s, to_timestamp(t), v FROM unnest(%s::bigint[], %s::double precision[], %s::double precision[]) AS u(s, t, v)
    ON CONFLICT DO NOTHING
"""
_DIRTY_SQL = f"""
    INSERT INTO {RollupDirtyPeriod._meta.db_table} (period_start, version)
    SELECT to_timestamp(p), 1 FROM unnest(%s::double precision[]) AS u(p)
    ON CONFLICT (period_start) DO UPDATE SET version = {RollupDirtyPeriod._meta.db_table}.version + 1
"""


# -- storing ------------------------------------------------------------------------------------
def store_metrics(node_id: int, batch: dict[str, Any]) -> int:
    """Store a `metrics` message of node `node_id`; returns how many samples were valid.

    Training metrics (a `job` dimension) only for jobs this node ran, under a role it held for
    them (jobs.channel.writes): anything else refuses the message. Samples of deleted jobs drop."""
    samples = parse(batch.get("samples"))
    roles = metric_jobs(node_id, {s.job_id for s in samples if s.job_id is not None})
    for sample in samples:
        if sample.job_id in roles and sample.stream and sample.stream not in roles[sample.job_id]:
            raise RefusedWrite(f"this node never was {sample.stream} of job {sample.job_id}")
    samples = [s for s in samples if s.job_id is None or s.job_id in roles]
    if not samples:
        return 0
    node = node_name(node_id)
    store_samples(node, samples)
    publish(node, samples)
    return len(samples)


def store_samples(node: str, samples: list[Sample], now: float | None = None) -> None:
    try:
        _store(node, samples, now)
    except IntegrityError:
        # a cached series was deleted meanwhile (retention): look the series up again
        forget_cached_series()
        _store(node, samples, now)


def _store(node: str, samples: list[Sample], now: float | None = None) -> None:
    now = time.time() if now is None else now
    late = sorted({period_start(s.ts) for s in samples if is_late(s.ts, now)})
    with transaction.atomic():
        ids = _series_ids_for(node, samples)
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(_SAMPLES_SQL, [[ids[s.key(node)] for s in samples], [s.ts for s in samples], [s.value for s in samples]])
                if late:
                    cursor.execute(_DIRTY_SQL, [late])
        else:
            MetricSample.objects.bulk_create([
                MetricSample(series_id=ids[s.key(node)], ts=datetime.fromtimestamp(s.ts, tz=UTC), value=s.value)
                for s in samples
            ], ignore_conflicts=True)
            for start in late:
                mark_dirty(datetime.fromtimestamp(start, tz=UTC))


def mark_dirty(start: datetime) -> None:
    updated = RollupDirtyPeriod.objects.filter(period_start=start).update(version=F("version") + 1)
    if not updated:
        RollupDirtyPeriod.objects.get_or_create(period_start=start)


def publish(node: str, samples: list[Sample]) -> None:
    """Send each job's new samples to the browsers watching it (group `job-<id>`)."""
    by_job: dict[int, list[list[Any]]] = defaultdict(list)
    now = time.time()
    for s in samples:
        # a backlog re-sent after an outage is not news: the page shows it on its next load
        if s.job_id is not None and not is_late(s.ts, now):
            dims: dict[str, Any] = {"node": node, "gpu": s.gpu} if s.gpu is not None else {"stream": s.stream}
            by_job[s.job_id].append([s.metric, s.ts, s.value, dims])
    # one send for every job of the batch; lost: the chart shows them on its next load
    live.publish_many([
        (job_group(job_id), dict(MetricsEvent(type="job.metrics", job_id=job_id, samples=job_samples)))
        for job_id, job_samples in by_job.items()
    ])
