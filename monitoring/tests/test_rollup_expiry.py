"""A series whose data all expired is removed, and ingestion re-creates it (transactional: the retry happens at a real commit)."""

from __future__ import annotations

import pytest

from monitoring import rollup_runs
from monitoring.models import MetricRollup, MetricSample, MetricSeries

from .conftest import NOW, gpu_samples, store
from .test_rollup_runs import at


@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # the retry happens at a real commit
def test_a_series_whose_data_all_expired_is_removed(settings):
    settings.METRICS_RAW_RETENTION_DAYS, settings.METRICS_ROLLUP_RETENTION_DAYS = 1, 1
    store("node-a", gpu_samples("GPUUtilization", None, "node-a", 0, [(NOW - 3 * 86_400, 1.0)]), now=NOW)
    rollup_runs.run_rollup(now=at(NOW))
    rollup_runs.purge(now=at(NOW))
    assert not MetricSeries.objects.exists() and not MetricRollup.objects.exists()
    # ingestion re-creates the series it had cached
    store("node-a", gpu_samples("GPUUtilization", None, "node-a", 0, [(NOW, 2.0)]), now=NOW)
    assert MetricSample.objects.count() == 1
