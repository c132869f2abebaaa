"""The metric catalogue: everything an agent sends is described; the key metrics are the seed's."""

from __future__ import annotations

from monitoring import catalog
from nodeagent.gpu_metrics import GPU_METRICS
from nodeagent.node_stats import NODE_METRICS
from nodeagent.trainmetrics import TRAINING_METRICS


def test_every_metric_an_agent_sends_is_in_the_catalogue_with_its_scope():
    sent = {**dict.fromkeys(GPU_METRICS, "gpu"), **dict.fromkeys(NODE_METRICS, "node"), **dict.fromkeys(TRAINING_METRICS, "training")}
    assert {name: str(m.scope) for name, m in catalog.METRICS.items()} == sent


def test_the_key_metrics_and_their_primary_statistics():
    assert {m.name: str(m.primary) for m in catalog.KEY_METRICS} == {
        "GPUUtilization": "Average", "GPUMemoryUsed": "Maximum", "GPUTemperature": "Maximum",
        "GPUPowerDraw": "Average", "TrainingLoss": "Average",
    }


def test_every_metric_has_a_unit_and_a_description():
    for metric in catalog.METRICS.values():
        assert metric.unit and metric.description and metric.label, metric.name
