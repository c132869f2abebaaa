"""The metric catalogue of the SimpleAITraining namespace: unit, description, primary statistic.

Plain data (no Django): the API validates names against it, the charts take their titles,
units and default statistic from it, and the service dashboard shows the key metrics. The
names are the ones the node agent sends (nodeagent.gpu_metrics, node_stats, trainmetrics).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

NAMESPACE = "SimpleAITraining"


class Statistic(StrEnum):
    AVERAGE = "Average"
    MINIMUM = "Minimum"
    MAXIMUM = "Maximum"
    SUM = "Sum"
    SAMPLE_COUNT = "SampleCount"


class Scope(StrEnum):
    GPU = "gpu"  # one series per device: dimensions node, gpu (and job while a job holds it)
    NODE = "node"  # one series per node
    TRAINING = "training"  # one series per job and stream (node role), across failovers


# The dimensions that tell the lines of one chart apart, per scope.
LINE_DIMENSIONS: dict[Scope, tuple[str, ...]] = {
    Scope.GPU: ("node", "gpu"),
    Scope.NODE: ("node",),
    Scope.TRAINING: ("stream",),
}


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    unit: str
    description: str
    primary: Statistic
    scope: Scope
    key: bool = False  # a key metric: on the service dashboard and first on the Monitoring tab


_G, _N, _T = Scope.GPU, Scope.NODE, Scope.TRAINING
_AVG, _MAX = Statistic.AVERAGE, Statistic.MAXIMUM

METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("GPUUtilization", "GPU utilisation", "Percent", "Time the GPU's kernels were running, over the sample window", _AVG, _G, key=True),
    Metric("GPUMemoryUsed", "GPU memory used", "Gigabytes", "Device memory allocated (GiB)", _MAX, _G, key=True),
    Metric("GPUTemperature", "GPU temperature", "Celsius", "Die temperature", _MAX, _G, key=True),
    Metric("GPUPowerDraw", "GPU power", "Watts", "Power drawn by the board", _AVG, _G, key=True),
    Metric("GPUMemoryUtilization", "GPU memory activity", "Percent", "Time device memory was being read or written", _AVG, _G),
    Metric("GPUMemoryTotal", "GPU memory total", "Gigabytes", "Device memory installed (GiB)", _MAX, _G),
    Metric("GPUSMClock", "SM clock", "Megahertz", "Streaming multiprocessor clock", _AVG, _G),
    Metric("GPUECCErrorsUncorrected", "Uncorrected ECC errors", "Count", "Uncorrected memory errors since the driver loaded (volatile counter)", _MAX, _G),
    Metric("GPUPCIeRxThroughput", "PCIe receive", "Megabytes/Second", "Data received over PCIe", _AVG, _G),
    Metric("GPUPCIeTxThroughput", "PCIe transmit", "Megabytes/Second", "Data sent over PCIe", _AVG, _G),
    Metric("GPUNVLinkRxThroughput", "NVLink receive", "Megabytes/Second", "Data received over NVLink, all links", _AVG, _G),
    Metric("GPUNVLinkTxThroughput", "NVLink transmit", "Megabytes/Second", "Data sent over NVLink, all links", _AVG, _G),
    Metric("NodeCPUUtilization", "CPU utilisation", "Percent", "Busy time of all CPUs of the node", _AVG, _N),
    Metric("NodeMemoryUtilization", "Memory utilisation", "Percent", "Memory in use (total − available)", _AVG, _N),
    Metric("NodeMemoryUsed", "Memory used", "Gigabytes", "Memory in use (GiB)", _AVG, _N),
    Metric("NodeDiskReadThroughput", "Disk read", "Megabytes/Second", "Bytes read from the node's disks", _AVG, _N),
    Metric("NodeDiskWriteThroughput", "Disk write", "Megabytes/Second", "Bytes written to the node's disks", _AVG, _N),
    Metric("NodeDiskSpaceUtilization", "Disk space used", "Percent", "Space used on the agent's work-directory file system", _MAX, _N),
    Metric("NodeNetworkRxThroughput", "Network receive", "Megabytes/Second", "Bytes received on physical interfaces", _AVG, _N),
    Metric("NodeNetworkTxThroughput", "Network transmit", "Megabytes/Second", "Bytes sent on physical interfaces", _AVG, _N),
    Metric("TrainingLoss", "Loss", "None", "Training loss printed by the script (Trainer logs or SIMPLEAI_METRIC)", _AVG, _T, key=True),
    Metric("TrainingEvalLoss", "Evaluation loss", "None", "Evaluation loss printed by the script", _AVG, _T),
    Metric("TrainingLearningRate", "Learning rate", "None", "Learning rate printed by the script", _AVG, _T),
    Metric("TrainingGradNorm", "Gradient norm", "None", "Gradient norm printed by the script", _AVG, _T),
    Metric("TrainingThroughput", "Training throughput", "Count/Second", "Samples per second printed by the script", _AVG, _T),
    Metric("TrainingStep", "Step", "Count", "Global step printed by the script", _MAX, _T),
    Metric("TrainingEpoch", "Epoch", "None", "Epoch printed by the script", _MAX, _T),
)}

KEY_METRICS: tuple[Metric, ...] = tuple(m for m in METRICS.values() if m.key)
GPU_METRICS: tuple[Metric, ...] = tuple(m for m in METRICS.values() if m.scope == Scope.GPU)
TRAINING_METRICS: tuple[Metric, ...] = tuple(m for m in METRICS.values() if m.scope == Scope.TRAINING)
NODE_METRICS: tuple[Metric, ...] = tuple(m for m in METRICS.values() if m.scope == Scope.NODE)
# what a job's owner may query: their GPUs and their script's metrics (node metrics describe
# a machine other jobs may share, so they are for staff)
JOB_METRICS: tuple[Metric, ...] = GPU_METRICS + TRAINING_METRICS


def as_json() -> list[dict[str, str | bool]]:
    """The catalogue for pages (chart titles, units, primary statistics)."""
    return [
        {"name": m.name, "label": m.label, "unit": m.unit, "description": m.description,
         "primary": str(m.primary), "scope": str(m.scope), "key": m.key}
        for m in METRICS.values()
    ]
