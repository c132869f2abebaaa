"""`simpleai metrics JOB`: a text summary of a job's metrics over its life.

For each metric, each series (a stream of the script's metrics, a GPU of a node): the last,
lowest, highest and mean value of the per-period statistic the console answers by default
(the metric's primary one: the average loss, the highest GPU memory, …).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from .api_types import MetricResult

# what a job's owner may query (monitoring.catalog.JOB_METRICS), the training ones first
METRICS = (
    "TrainingLoss", "TrainingEvalLoss", "TrainingLearningRate", "TrainingGradNorm", "TrainingThroughput",
    "TrainingStep", "TrainingEpoch",
    "GPUUtilization", "GPUMemoryUsed", "GPUMemoryUtilization", "GPUPowerDraw", "GPUTemperature",
)
SHORT_PERIODS = (1, 5, 10, 30)
MAX_POINTS = 1440  # the API's most per line
ROLLUP = 300  # seconds: ranges over 6 h, or older than the raw retention, come from 5-minute statistics
RAW_RANGE = 6 * 3600


@dataclass(frozen=True)
class Row:
    metric: str
    series: str
    unit: str
    statistic: str
    last: float
    low: float
    high: float
    mean: float
    points: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def period_for(seconds: float, rollup: bool = False) -> int:
    """The finest period the API allows for a range of `seconds` (at most MAX_POINTS points)."""
    if not rollup and seconds <= RAW_RANGE:
        for period in SHORT_PERIODS:
            if seconds / period <= MAX_POINTS:
                return period
    step = ROLLUP if rollup or seconds > RAW_RANGE else 60
    return step * max(1, math.ceil(seconds / MAX_POINTS / step))


def rows(result: MetricResult) -> list[Row]:
    found = []
    for series in result["series"]:
        values = [point["value"] for point in series["points"] if point["value"] is not None]
        if values:
            found.append(Row(result["metric"], series["label"] or "-", result["unit"], result["statistic"],
                             values[-1], min(values), max(values), sum(values) / len(values), len(values)))
    return found


def number(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e6 else f"{value:.3e}"


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat().replace("+00:00", "Z")
