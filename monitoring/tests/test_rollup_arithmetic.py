"""Roll-up arithmetic (monitoring.rollup) against statistics computed by hand. No database."""

from __future__ import annotations

import random

import pytest

from monitoring.catalog import Statistic
from monitoring.rollup import LATE_MARGIN, PERIOD, Stats, aggregate, combine, is_late, period_start, plan

T0 = 1_741_608_000.0  # 2025-03-10 12:00:00 UTC, a period boundary


def test_the_five_statistics_of_a_period():
    stats = aggregate([("gpu0", T0 + 10, 10.0), ("gpu0", T0 + 20, 20.0), ("gpu0", T0 + 290, 60.0)])
    assert stats == {("gpu0", T0): Stats(count=3, total=90.0, minimum=10.0, maximum=60.0)}
    s = stats[("gpu0", T0)]
    assert [s.value(st) for st in Statistic] == [30.0, 10.0, 60.0, 90.0, 3.0]


def test_a_sample_on_a_boundary_opens_the_next_period():
    stats = aggregate([("k", T0 - 0.001, 1.0), ("k", T0, 2.0), ("k", T0 + PERIOD - 0.001, 3.0), ("k", T0 + PERIOD, 4.0)])
    assert stats == {
        ("k", T0 - PERIOD): Stats(1, 1.0, 1.0, 1.0),
        ("k", T0): Stats(2, 5.0, 2.0, 3.0),
        ("k", T0 + PERIOD): Stats(1, 4.0, 4.0, 4.0),
    }
    assert period_start(T0 + 299.999) == T0


def test_a_gap_stays_a_gap_and_series_stay_apart():
    # GPU 0 reports at 12:00 and 12:10 but not 12:05 (agent down); GPU 1 only at 12:05
    stats = aggregate([("gpu0", T0 + 5, 50.0), ("gpu0", T0 + 605, 70.0), ("gpu1", T0 + 305, 90.0)])
    assert sorted(stats) == [("gpu0", T0), ("gpu0", T0 + 600), ("gpu1", T0 + 300)]


def test_longer_periods_merge_roll_ups_exactly():
    # an hour from three 5-minute roll-ups: average weighted by sample count, not by period
    hour = combine([
        ("k", T0, 30, 300.0, 5.0, 20.0),  # average 10
        ("k", T0 + 300, 10, 500.0, 40.0, 60.0),  # average 50
        ("k", T0 + 3300, 20, 0.0, -1.0, 1.0),
    ], 3600)
    assert hour == {("k", T0): Stats(60, 800.0, -1.0, 60.0)}
    assert hour[("k", T0)].average == pytest.approx(800 / 60)


def test_a_period_that_is_not_whole_roll_ups_is_refused():
    with pytest.raises(ValueError, match="multiple of 300"):
        combine([], 120)


def test_roll_ups_of_a_day_agree_with_raw_samples_at_every_period():
    rng = random.Random(7)
    samples = [("k", T0 + rng.uniform(0, 86_400), rng.uniform(0, 100)) for _ in range(5_000)]
    five = aggregate(samples)
    for period in (300, 900, 3600, 86_400):
        merged = combine(((key, start, s.count, s.total, s.minimum, s.maximum) for (key, start), s in five.items()), period)
        direct = aggregate(samples, period)
        assert merged.keys() == direct.keys()
        for bucket, s in direct.items():
            assert (merged[bucket].count, merged[bucket].minimum, merged[bucket].maximum) == (s.count, s.minimum, s.maximum)
            assert merged[bucket].total == pytest.approx(s.total)


def test_the_first_run_starts_at_the_oldest_sample():
    todo = plan(previous_run=None, now=T0 + 1000, oldest_sample=T0 - 7200 + 17, dirty=[])
    assert (todo.start, todo.end, todo.dirty) == (T0 - 7200, T0 + 1200, ())
    assert plan(None, T0, None, []) is None  # nothing stored yet


def test_later_runs_recompute_the_margin_before_the_previous_run_and_the_open_period():
    todo = plan(previous_run=T0 + 130, now=T0 + 190, oldest_sample=None, dirty=[])
    assert todo.start == period_start(T0 + 130 - LATE_MARGIN) == T0 - 900
    assert todo.end == T0 + 300  # the open period 12:00–12:05 is rolled now and again later


def test_dirty_periods_before_the_window_are_recomputed_once():
    todo = plan(previous_run=T0, now=T0 + 60, oldest_sample=None, dirty=[T0 - 86_400, T0 - 86_400, T0 - 300])
    assert todo.dirty == (T0 - 86_400,)  # 11:55 is inside the window already


def test_no_late_sample_is_ever_left_out():
    """Runs at irregular times, samples arriving with any delay: each one is either inside the
    window of the first run after it was stored, or its period was marked dirty."""
    rng = random.Random(11)
    runs, t = [], T0
    while t < T0 + 6 * 3600:
        t += rng.choice([1, 30, 60, 61, 120, 600, 1800])  # beat late, worker busy, worker down
        runs.append(t)
    for _ in range(20_000):
        stored = rng.uniform(T0, runs[-2])
        ts = stored - rng.choice([0, 1, 59, 300, LATE_MARGIN / 2 - 1, LATE_MARGIN / 2 + 1, 3000, 86_400]) * rng.random()
        nxt = next(i for i, run in enumerate(runs) if run > stored)
        previous = runs[nxt - 1] if nxt else None
        todo = plan(previous, runs[nxt], ts, [period_start(ts)] if is_late(ts, stored) else [])
        assert todo.start <= ts < todo.end or period_start(ts) in todo.dirty
