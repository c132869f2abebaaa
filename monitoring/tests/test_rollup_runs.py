"""Roll-up runs and retention in the database: hand-computed rows, idempotence, late samples."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from monitoring import rollup_runs
from monitoring.models import MetricSample, MetricSeries, RollupDirtyPeriod
from monitoring.rollup import aggregate

from .conftest import NOW, gpu_samples, rollups, store

pytestmark = pytest.mark.django_db
KEY0 = "SimpleAITraining/GPUUtilization|job=|node=node-a|gpu=0|stream="


def at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def test_a_run_writes_the_hand_computed_statistics_of_each_period():
    # 11:55–12:00 has two samples, 12:00–12:05 none (gap), 12:05–12:10 three; one sits on 12:05:00
    store("node-a", gpu_samples("GPUUtilization", None, "node-a", 0, [
        (NOW - 200, 40.0), (NOW - 1, 60.0), (NOW + 300, 10.0), (NOW + 450, 20.0), (NOW + 599.5, 90.0),
    ]), now=NOW + 600)
    rollup_runs.run_rollup(now=at(NOW + 600))
    assert rollups() == {
        (KEY0, NOW - 300): (2, 100.0, 40.0, 60.0),
        (KEY0, NOW + 300): (3, 120.0, 10.0, 90.0),
    }


def test_running_twice_gives_the_same_rows():
    store("node-a", gpu_samples("GPUPowerDraw", 7, "node-a", 3, [(NOW + i, float(i)) for i in range(0, 600, 10)]), now=NOW + 600)
    rollup_runs.run_rollup(now=at(NOW + 600))
    first = rollups()
    rollup_runs.run_rollup(now=at(NOW + 660))
    rollup_runs.run_rollup(now=at(NOW + 660))
    assert rollups() == first
    assert len(first) == 2


def test_the_open_period_is_recomputed_when_more_samples_arrive():
    store("node-a", gpu_samples("GPUUtilization", None, "node-a", 0, [(NOW + 10, 10.0)]), now=NOW + 20)
    rollup_runs.run_rollup(now=at(NOW + 30))
    assert rollups() == {(KEY0, NOW): (1, 10.0, 10.0, 10.0)}
    store("node-a", gpu_samples("GPUUtilization", None, "node-a", 0, [(NOW + 100, 30.0)]), now=NOW + 110)
    rollup_runs.run_rollup(now=at(NOW + 120))
    assert rollups() == {(KEY0, NOW): (2, 40.0, 10.0, 30.0)}


def test_a_sample_that_arrives_hours_late_is_folded_into_its_period():
    store("node-a", gpu_samples("GPUUtilization", None, "node-a", 0, [(NOW - 7200 + 5, 50.0)]), now=NOW - 7200 + 10)
    rollup_runs.run_rollup(now=at(NOW - 7200 + 20))
    rollup_runs.run_rollup(now=at(NOW))  # two hours on: the window has long left 10:00
    # the agent was cut off: its spooled sample of 10:00 arrives now
    store("node-a", gpu_samples("GPUUtilization", None, "node-a", 0, [(NOW - 7200 + 100, 70.0)]), now=NOW + 30)
    assert RollupDirtyPeriod.objects.count() == 1
    rollup_runs.run_rollup(now=at(NOW + 60))
    assert rollups()[(KEY0, NOW - 7200)] == (2, 120.0, 50.0, 70.0)
    assert not RollupDirtyPeriod.objects.exists()


def test_the_database_computes_what_the_plain_functions_compute():
    rng = random.Random(3)
    points = {gpu: [(NOW + rng.uniform(0, 3600), rng.uniform(0, 100)) for _ in range(300)] for gpu in range(3)}
    for gpu, pts in points.items():
        store("node-a", gpu_samples("GPUTemperature", None, "node-a", gpu, pts), now=NOW + 3600)
    rollup_runs.run_rollup(now=at(NOW + 3600))
    # the stored timestamps are microseconds: compute from what was stored
    stored = MetricSample.objects.values_list("series__key", "ts", "value")
    expected = aggregate((key, ts.timestamp(), value) for key, ts, value in stored)
    got = rollups()
    assert got.keys() == expected.keys()
    for bucket, s in expected.items():
        count, total, lo, hi = got[bucket]
        assert (count, lo, hi) == (s.count, s.minimum, s.maximum)
        assert total == pytest.approx(s.total)


def test_retention_deletes_old_samples_and_roll_ups_and_nothing_else(settings, make_job):
    settings.METRICS_RAW_RETENTION_DAYS, settings.METRICS_ROLLUP_RETENTION_DAYS = 7, 90
    job, deleted_job = make_job(name="kept"), make_job(name="deleted")
    day = 86_400
    store("node-a", gpu_samples("GPUUtilization", job.pk, "node-a", 0, [(NOW - 8 * day, 1.0), (NOW - 6 * day, 2.0)]), now=NOW)
    store("node-a", gpu_samples("GPUUtilization", deleted_job.pk, "node-a", 1, [(NOW - day, 3.0)]), now=NOW)
    store("node-b", gpu_samples("GPUUtilization", None, "node-b", 0, [(NOW - 91 * day, 4.0), (NOW - 89 * day, 5.0)]), now=NOW)
    rollup_runs.run_rollup(now=at(NOW))
    deleted_id = deleted_job.pk
    deleted_job.delete()

    result = rollup_runs.purge(now=at(NOW))

    remaining = {(key, round(ts.timestamp())) for key, ts in MetricSample.objects.values_list("series__key", "ts")}
    assert remaining == {(f"SimpleAITraining/GPUUtilization|job={job.pk}|node=node-a|gpu=0|stream=", NOW - 6 * day)}
    periods = sorted((key.split("|")[2], start) for key, start in rollups())
    # the 8-day-old sample lives on in its roll-up; node-b's 91-day-old roll-up is gone
    assert periods == [("node=node-a", NOW - 8 * day), ("node=node-a", NOW - 6 * day), ("node=node-b", NOW - 89 * day)]
    assert not MetricSeries.objects.filter(job_id=deleted_id).exists()
    assert (result.samples, result.rollups) == (3, 1)
    # the next purge has nothing left to do
    assert rollup_runs.purge(now=at(NOW)) == rollup_runs.PurgeResult(0, 0, 0)
