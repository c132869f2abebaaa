"""Reading metrics: a time range, a period and a statistic → one line of points per device.

Short ranges whose raw samples are still kept are computed from raw samples (any period);
longer ones from the stored 5-minute roll-ups (periods that are multiples of 5 minutes), so a
7-day chart reads ~2,000 rows per line instead of ~60,000 samples. Both go through the plain
arithmetic of monitoring.rollup.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Expression, F
from django.db.models.expressions import RawSQL

from . import catalog
from .models import MetricRollup, MetricSample, MetricSeries
from .rollup import PERIOD, Stats, aggregate, combine, period_start

RAW_RANGE_LIMIT = 6 * 3600  # seconds: longer ranges are answered from roll-ups
MAX_POINTS = 1440  # per line
SHORT_PERIODS = (1, 5, 10, 30)  # otherwise a period is a multiple of 60 s (as CloudWatch)
DEFAULT_PERIODS = (60, 300, 3600, 21600, 86400)


class QueryError(ValueError):
    """A query the user can fix; the message says how, `field` names the parameter to change."""

    def __init__(self, message: str, field: str = "period") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Dimensions:
    """Which series to read; None means any."""

    job_id: int | None = None
    node: str | None = None
    gpu: int | None = None
    stream: str | None = None


@dataclass
class Line:
    dimensions: dict[str, Any]
    points: list[tuple[float, float, int]] = field(default_factory=list)  # (period start, value, samples)


@dataclass
class Result:
    metric: catalog.Metric
    statistic: catalog.Statistic
    period: int
    start: float
    end: float
    source: str  # "raw" | "rollup"
    lines: list[Line]


def default_period(seconds: float) -> int:
    """The shortest standard period that draws at most 360 points (1 h → 1 min, 7 d → 1 h)."""
    for period in DEFAULT_PERIODS:
        if seconds / period <= 360:
            return period
    return DEFAULT_PERIODS[-1] * ((int(seconds) // (360 * DEFAULT_PERIODS[-1])) + 1)


def source_for(start: float, end: float, now: float) -> str:
    raw_from = now - settings.METRICS_RAW_RETENTION_DAYS * 86400
    return "raw" if end - start <= RAW_RANGE_LIMIT and start >= raw_from else "rollup"


def check_period(period: int, start: float, end: float, source: str) -> None:
    if period < 1 or (period not in SHORT_PERIODS and period % 60):
        raise QueryError("period must be 1, 5, 10, 30 or a multiple of 60 seconds")
    if source == "rollup" and period % PERIOD:
        raise QueryError(
            f"ranges longer than {RAW_RANGE_LIMIT // 3600} hours (or older than the raw retention) are read "
            f"from 5-minute statistics: period must be a multiple of {PERIOD} seconds")
    if (end - start) / period > MAX_POINTS:
        shortest = -(-int(end - start) // MAX_POINTS)
        raise QueryError(f"at most {MAX_POINTS} points per line: use a period of at least {shortest} seconds")


def line_key(metric: catalog.Metric, series: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(series[name] for name in catalog.LINE_DIMENSIONS[metric.scope])


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def query(metric: catalog.Metric, statistic: catalog.Statistic, start: float, end: float, period: int | None,
          dims: Dimensions, now: float) -> Result:
    """Points of every line of `metric` in [start, end); raises QueryError for a bad request."""
    if end <= start:
        raise QueryError("end must be after start", field="end")
    source = source_for(start, end, now)
    period = period or default_period(end - start)
    check_period(period, start, end, source)
    series = _series(metric, dims)
    keys = {row["id"]: line_key(metric, row) for row in series}
    if source == "raw":
        samples = MetricSample.objects.filter(series_id__in=keys, ts__gte=_dt(start), ts__lt=_dt(end))
        rows = samples.annotate(t=_epoch("ts")).values_list("series_id", "t", "value")
        stats = aggregate(((keys[s], _seconds(t), v) for s, t, v in rows), period)
    else:
        rollups = MetricRollup.objects.filter(
            series_id__in=keys, period_start__gte=_dt(period_start(start, PERIOD)), period_start__lt=_dt(end))
        rows = rollups.annotate(t=_epoch("period_start")).values_list("series_id", "t", "sample_count", "total", "minimum", "maximum")
        stats = combine(((keys[s], _seconds(t), n, total, lo, hi) for s, t, n, total, lo, hi in rows), period)
    return Result(metric, statistic, period, start, end, source, _lines(metric, statistic, stats))


def _epoch(column: str) -> Expression:
    """Unix seconds as a float, computed by PostgreSQL: parsing ~16,000 timestamps into
    datetimes was most of a 7-day chart's time. Other databases hand back the datetime."""
    if connection.vendor == "postgresql":
        return RawSQL(f"extract(epoch FROM {connection.ops.quote_name(column)})::float8", [])
    return F(column)


def _seconds(value: float | datetime) -> float:
    return value.timestamp() if isinstance(value, datetime) else value


def _series(metric: catalog.Metric, dims: Dimensions) -> list[dict[str, Any]]:
    series = MetricSeries.objects.filter(namespace=catalog.NAMESPACE, metric=metric.name)
    if dims.job_id is not None:
        series = series.filter(job_id=dims.job_id)
    if dims.node is not None:
        series = series.filter(node=dims.node)
    if dims.gpu is not None:
        series = series.filter(gpu=dims.gpu)
    if dims.stream is not None:
        series = series.filter(stream=dims.stream)
    return list(series.values("id", "node", "gpu", "stream"))


def _lines(metric: catalog.Metric, statistic: catalog.Statistic, stats: dict[tuple[Any, float], Stats]) -> list[Line]:
    names = catalog.LINE_DIMENSIONS[metric.scope]
    lines: dict[tuple[Any, ...], Line] = {}
    for (key, begin), s in sorted(stats.items(), key=lambda item: (str(item[0][0]), item[0][1])):
        line = lines.get(key)
        if line is None:
            line = lines[key] = Line(dict(zip(names, key, strict=True)))
        line.points.append((begin, s.value(statistic), s.count))
    return sorted(lines.values(), key=lambda line: tuple((v is None, v) for v in line.dimensions.values()))


# -- current values (dashboard, node pages) ------------------------------------------------------
def recent_samples(series_filter: dict[str, Any], metrics: Iterable[str], since: float) -> list[tuple[dict[str, Any], float, float]]:
    """(series row, ts, value) of the matching series since `since`, oldest first.

    Two queries: the series first, then their samples through the (series, ts) key (a join
    filtered on time would scan every series' recent samples).
    """
    series = {
        row["id"]: row for row in MetricSeries.objects.filter(metric__in=list(metrics), **series_filter)
        .values("id", "metric", "job_id", "node", "gpu", "stream")
    }
    rows = (
        MetricSample.objects.filter(series_id__in=series, ts__gte=_dt(since))
        .order_by("ts").values_list("series_id", "ts", "value")
    )
    return [(series[series_id], ts.timestamp(), value) for series_id, ts, value in rows]


def latest_by_gpu(node: str, metrics: Iterable[str], since: float) -> dict[int, dict[str, float]]:
    """{gpu index: {metric: newest value}} of one node's devices (staff node page)."""
    latest: dict[int, dict[str, float]] = defaultdict(dict)
    for series, _, value in recent_samples({"node": node}, metrics, since):
        if series["gpu"] is not None:
            latest[series["gpu"]][series["metric"]] = value
    return dict(latest)


def latest_by_node(metrics: Iterable[str], since: float) -> dict[str, dict[str, list[float]]]:
    """{node: {metric: [newest value of each device or the node]}} (staff node list)."""
    newest: dict[tuple[str, str, Any], float] = {}
    for series, _, value in recent_samples({}, metrics, since):
        newest[(series["node"], series["metric"], series["gpu"])] = value
    result: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (node, metric, _), value in newest.items():
        result[node][metric].append(value)
    return {node: dict(values) for node, values in result.items()}
