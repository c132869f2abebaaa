"""Ingestion's cache of series ids is shared by every agent thread of a console process and
may be emptied at any moment (its size cap, retention's retry on another thread): a batch
being stored must still be stored whole."""

from __future__ import annotations

import pytest

from monitoring import metrics_ingest
from monitoring.models import MetricSample, MetricSeries

from .conftest import NOW, gpu_samples, store

pytestmark = pytest.mark.django_db


def batch(gpus: list[int], ts: float) -> list[list]:
    return [s for gpu in gpus for s in gpu_samples("GPUUtilization", None, "node-a", gpu, [(ts, float(gpu))])]


def test_a_batch_with_known_and_new_series_is_stored_whole_when_the_cache_reaches_its_cap(monkeypatch):
    monkeypatch.setattr(metrics_ingest, "MAX_SERIES_CACHE", 1)
    store("node-a", batch([0], NOW), now=NOW)
    store("node-a", batch([1], NOW), now=NOW)
    # GPUs 0 and 1 are cached, past the cap; GPU 2 is new and makes the cache start again
    store("node-a", batch([0, 2], NOW + 1), now=NOW)
    assert MetricSeries.objects.count() == 3
    assert MetricSample.objects.count() == 4


def test_a_batch_is_stored_whole_when_another_thread_empties_the_cache_meanwhile(monkeypatch):
    store("node-a", batch([0], NOW), now=NOW)
    real_filter = MetricSeries.objects.filter

    def filter_after_a_clear(*args, **kwargs):
        metrics_ingest.forget_cached_series()  # as retention's retry does on another thread
        return real_filter(*args, **kwargs)

    monkeypatch.setattr(MetricSeries.objects, "filter", filter_after_a_clear)
    store("node-a", batch([0, 1], NOW + 1), now=NOW)
    assert sorted(MetricSample.objects.values_list("value", flat=True)) == [0.0, 0.0, 1.0]
