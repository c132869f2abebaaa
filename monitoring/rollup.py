"""Statistics arithmetic: periods, roll-ups, and which periods a roll-up run must (re)compute.

Plain functions over plain data (no Django). Times are unix seconds (floats); a period is
named by its start, a multiple of its length counted from the epoch (so 5-minute periods
start at :00, :05, … UTC), and holds samples with start <= ts < start + length.

How late samples are folded in (the roll-up "watermark" design):
- every run recomputes whole periods from `previous run start − LATE_MARGIN` up to now, so a
  sample that arrives up to LATE_MARGIN after its timestamp is always covered by a later run;
- ingestion marks the period of any sample older than `now − LATE_MARGIN / 2` as dirty (half
  the margin: the time between the ingest's clock reading and its commit can never make a
  sample fall between the two rules); a run also recomputes every dirty period.
Recomputing a period replaces its roll-up rows, so running twice gives the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from .catalog import Statistic

K = TypeVar("K", bound=Hashable)  # what the samples are grouped by (a series id, a GPU index)
PERIOD = 300  # seconds: the stored roll-up resolution
LATE_MARGIN = 3 * PERIOD


@dataclass(frozen=True)
class Stats:
    """Everything needed to answer any statistic of a set of samples, and to merge sets."""

    count: int
    total: float
    minimum: float
    maximum: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Stats:
        values = list(values)
        if not values:
            raise ValueError("no samples")
        return cls(len(values), math.fsum(values), min(values), max(values))

    def add(self, value: float) -> Stats:
        return Stats(self.count + 1, self.total + value, min(self.minimum, value), max(self.maximum, value))

    def merge(self, other: Stats) -> Stats:
        return Stats(self.count + other.count, self.total + other.total,
                     min(self.minimum, other.minimum), max(self.maximum, other.maximum))

    @property
    def average(self) -> float:
        return self.total / self.count

    def value(self, statistic: Statistic | str) -> float:
        statistic = Statistic(statistic)
        if statistic is Statistic.AVERAGE:
            return self.average
        if statistic is Statistic.MINIMUM:
            return self.minimum
        if statistic is Statistic.MAXIMUM:
            return self.maximum
        if statistic is Statistic.SUM:
            return self.total
        return float(self.count)


def period_start(ts: float, period: int = PERIOD) -> float:
    return math.floor(ts / period) * period


def aggregate(samples: Iterable[tuple[K, float, float]], period: int = PERIOD) -> dict[tuple[K, float], Stats]:
    """Raw samples (key, ts, value) → Stats per (key, period start). Periods without samples
    are absent (a gap stays a gap: no zero is invented)."""
    return _accumulate(((key, ts, 1, value, value, value) for key, ts, value in samples), period)


def combine(rollups: Iterable[tuple[K, float, int, float, float, float]], period: int) -> dict[tuple[K, float], Stats]:
    """Stored roll-ups (key, period start, count, sum, min, max) → Stats per (key, longer period).

    `period` must be a multiple of PERIOD: a 5-minute roll-up cannot be split.
    """
    if period % PERIOD:
        raise ValueError(f"a period built from roll-ups must be a multiple of {PERIOD} s")
    return _accumulate(rollups, period)


def _accumulate(rows: Iterable[tuple[K, float, int, float, float, float]], period: int) -> dict[tuple[K, float], Stats]:
    # mutable [count, sum, min, max] per bucket: a 7-day chart merges ~16,000 rows per request
    buckets: dict[tuple[K, float], list[float]] = {}
    for key, ts, count, total, minimum, maximum in rows:
        bucket = (key, math.floor(ts / period) * period)
        acc = buckets.get(bucket)
        if acc is None:
            buckets[bucket] = [count, total, minimum, maximum]
        else:
            acc[0] += count
            acc[1] += total
            if minimum < acc[2]:
                acc[2] = minimum
            if maximum > acc[3]:
                acc[3] = maximum
    return {bucket: Stats(int(count), total, low, high) for bucket, (count, total, low, high) in buckets.items()}


def is_late(ts: float, now: float, margin: float = LATE_MARGIN) -> bool:
    """Must ingestion mark this sample's period dirty? (See the module docstring.)"""
    return ts < now - margin / 2


@dataclass(frozen=True)
class Plan:
    start: float  # first period start of the window (inclusive)
    end: float  # end of the last period of the window (exclusive)
    dirty: tuple[float, ...]  # period starts outside the window that must be recomputed too


def plan(previous_run: float | None, now: float, oldest_sample: float | None, dirty: Iterable[float],
         margin: float = LATE_MARGIN, period: int = PERIOD) -> Plan | None:
    """What one run recomputes: whole periods from `previous_run − margin` (from the oldest
    sample on the first run) through the period holding `now` (still open: it is recomputed
    by the next run too), plus the dirty periods before that window. None: nothing to do."""
    if previous_run is None:
        if oldest_sample is None:
            return None
        start = period_start(oldest_sample, period)
    else:
        start = period_start(previous_run - margin, period)
    end = period_start(now, period) + period
    return Plan(start, end, tuple(sorted({p for p in dirty if p < start})))
