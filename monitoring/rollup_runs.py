"""Roll-up runs and retention against the database (the arithmetic is in monitoring.rollup).

`run_rollup` recomputes the periods `rollup.plan` names; on PostgreSQL one INSERT … SELECT …
GROUP BY per range does what `rollup.aggregate` does (a day of samples is tens of millions of
rows: they should not travel to Python), elsewhere the plain function itself runs. A test
checks that both give the same rows. Runs are serialised by a transaction-scoped advisory
lock; re-running recomputes the same rows (ON CONFLICT … DO UPDATE).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, Min, OuterRef, QuerySet
from django.utils import timezone

from jobs.models import TrainingJob

from .models import MetricRollup, MetricSample, MetricSeries, RollupDirtyPeriod, RollupState
from .rollup import PERIOD, Stats, aggregate, plan

log = logging.getLogger(__name__)
ROLLUP_LOCK_ID = 0x5A1_0110  # any 64-bit number unique to this lock


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


_ROLL_SQL = f"""
    INSERT INTO {MetricRollup._meta.db_table} (series_id, period_start, sample_count, total, minimum, maximum)
    SELECT series_id, date_bin('{PERIOD} seconds', ts, '1970-01-01 00:00:00+00'),
           count(*), sum(value), min(value), max(value)
    FROM {MetricSample._meta.db_table}
    WHERE ts >= %s AND ts < %s
    GROUP BY 1, 2
    ON CONFLICT (series_id, period_start) DO UPDATE SET
        sample_count = EXCLUDED.sample_count, total = EXCLUDED.total,
        minimum = EXCLUDED.minimum, maximum = EXCLUDED.maximum
"""


def roll_range(start: float, end: float) -> int:
    """Recompute every 5-minute roll-up in [start, end) (period-aligned); returns rows written."""
    if connection.vendor == "postgresql":
        with transaction.atomic(), connection.cursor() as cursor:
            # a day of samples has ~100k groups per hour: hash them in memory, not in temp files
            cursor.execute("SET LOCAL work_mem = '64MB'")
            cursor.execute(_ROLL_SQL, [_dt(start), _dt(end)])
            return cursor.rowcount
    samples = MetricSample.objects.filter(ts__gte=_dt(start), ts__lt=_dt(end)).values_list("series_id", "ts", "value")
    stats = aggregate((series, ts.timestamp(), value) for series, ts, value in samples.iterator(chunk_size=10_000))
    MetricRollup.objects.bulk_create(
        [_rollup_row(series, begin, s) for (series, begin), s in stats.items()],
        update_conflicts=True, unique_fields=["series", "period_start"],
        update_fields=["sample_count", "total", "minimum", "maximum"], batch_size=2000,
    )
    return len(stats)


def _rollup_row(series_id: int, begin: float, stats: Stats) -> MetricRollup:
    return MetricRollup(series_id=series_id, period_start=_dt(begin), sample_count=stats.count,
                        total=stats.total, minimum=stats.minimum, maximum=stats.maximum)


@dataclass(frozen=True)
class RollupRun:
    window: tuple[str, str] | None
    dirty_periods: int
    rows: int


@transaction.atomic
def run_rollup(now: datetime | None = None) -> RollupRun:
    """One roll-up run (the Celery beat task calls it every METRICS_ROLLUP_INTERVAL_SECONDS)."""
    now = now or timezone.now()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ROLLUP_LOCK_ID])
    state, _ = RollupState.objects.select_for_update().get_or_create(id=1)
    marks = list(RollupDirtyPeriod.objects.values_list("period_start", "version"))
    oldest = None
    if state.last_run_at is None:
        first = MetricSample.objects.aggregate(first=Min("ts"))["first"]
        oldest = first.timestamp() if first else None
    previous = state.last_run_at.timestamp() if state.last_run_at else None
    todo = plan(previous, now.timestamp(), oldest, [start.timestamp() for start, _ in marks])
    rows = 0
    if todo is not None:
        rows += roll_range(todo.start, todo.end)
        for start in todo.dirty:
            rows += roll_range(start, start + PERIOD)
    # a mark renewed since we read it (a later late sample) keeps its new version: next run
    for start, version in marks:
        RollupDirtyPeriod.objects.filter(period_start=start, version=version).delete()
    state.last_run_at = now
    state.save(update_fields=["last_run_at"])
    window = (_dt(todo.start).isoformat(), _dt(todo.end).isoformat()) if todo else None
    return RollupRun(window, len(todo.dirty) if todo else 0, rows)


@dataclass(frozen=True)
class PurgeResult:
    samples: int
    rollups: int
    series: int


def purge(now: datetime | None = None) -> PurgeResult:
    """Retention: raw samples older than METRICS_RAW_RETENTION_DAYS, roll-ups older than
    METRICS_ROLLUP_RETENTION_DAYS, the series of deleted jobs, and series left empty."""
    now = now or timezone.now()
    run_rollup(now)  # late samples of old periods are folded in before their raw rows go
    raw_cutoff = now - timedelta(days=settings.METRICS_RAW_RETENTION_DAYS)
    rollup_cutoff = now - timedelta(days=settings.METRICS_ROLLUP_RETENTION_DAYS)
    samples = MetricSample.objects.filter(ts__lt=raw_cutoff).delete()[0]
    rollups = MetricRollup.objects.filter(period_start__lt=rollup_cutoff).delete()[0]
    RollupDirtyPeriod.objects.filter(period_start__lt=raw_cutoff).delete()  # nothing left to roll
    gone = MetricSeries.objects.filter(job_id__isnull=False).exclude(
        job_id__in=TrainingJob.objects.values("pk"))
    series = _delete_series(gone)
    empty = MetricSeries.objects.filter(
        ~Exists(MetricSample.objects.filter(series=OuterRef("pk"))),
        ~Exists(MetricRollup.objects.filter(series=OuterRef("pk"))),
    )
    series += _delete_series(empty)
    return PurgeResult(samples, rollups, series)


def _delete_series(queryset: QuerySet[MetricSeries]) -> int:
    try:
        with transaction.atomic():
            deleted = queryset.delete()[1].get(MetricSeries._meta.label, 0)
    except IntegrityError:
        # a sample arrived for one of them meanwhile (ingestion re-creates deleted series
        # itself): leave them all to the next run
        log.info("metric series in use again; not deleted this time")
        return 0
    return deleted
