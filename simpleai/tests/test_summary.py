"""`simpleai metrics`: the finest period the API allows, and each series summed up."""

from __future__ import annotations

import pytest

from simpleai import summary


@pytest.mark.parametrize(("seconds", "rollup", "period"), [
    (30, False, 1), (1440, False, 1), (1441, False, 5), (7200, False, 5), (14400, False, 10), (21600, False, 30),
    (21601, False, 300), (86400 * 7, False, 600), (30, True, 300),
])
def test_the_period_keeps_within_the_apis_points_and_steps(seconds, rollup, period):
    assert summary.period_for(seconds, rollup) == period
    assert seconds / period <= summary.MAX_POINTS


def test_each_series_with_values_becomes_a_row():
    result = {"job": 1, "metric": "TrainingLoss", "unit": "None", "statistic": "Average", "period": 1, "start": "", "end": "",
              "series": [{"dimensions": {"stream": "master"}, "label": "master",
                          "points": [{"timestamp": "", "value": v, "sample_count": 1} for v in (2.0, 1.0, 1.5)]},
                         {"dimensions": {"stream": "worker-1"}, "label": "worker-1", "points": []}]}
    [row] = summary.rows(result)
    assert (row.series, row.last, row.low, row.high, row.mean, row.points) == ("master", 1.5, 1.0, 2.0, 1.5, 3)
