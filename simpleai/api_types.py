"""The API's answers as typed dictionaries (the fields the client reads; the API may send more)."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

# The writable fields of a job, as POST /api/v1/training-jobs/ takes them (a job file's keys):
# loosely typed on purpose, as the API validates them and words the messages.
JobFields = dict[str, Any]


class Tag(TypedDict):
    key: str
    value: str


class StatusChange(TypedDict):
    old_status: str
    new_status: str
    reason: str
    created_at: str


class Job(TypedDict):
    id: int
    name: str
    learning_type: str
    framework: str
    framework_version: str
    failover_enabled: bool
    server_type: str
    gpus_per_node: int
    memory_gb: int
    node_count: int
    shm_size_gb: int
    image_url: str
    registry_username: str
    has_registry_password: bool
    volume_mount_path: str
    script_url: str
    command: str
    tags: list[Tag]
    status: str
    status_reason: str
    created_at: str
    updated_at: str
    hourly_price: str
    cost: dict[str, Any]
    history: list[StatusChange]
    workspace: str
    keep_alive_minutes: int
    spot_fallback_after_minutes: int | None
    on_demand_since: str | None
    # issue 33 phase 2: where the project, the inputs and the results are (absent on older consoles)
    workdir_url: NotRequired[str]
    inputs: NotRequired[list[InputRef]]
    from_checkpoint: NotRequired[int | None]
    result_url: NotRequired[str]


class InputRef(TypedDict):
    name: str
    url: str


class Allocation(TypedDict):
    name: str
    gpus: int
    vcpus: int
    memory_gb: int


class ServerType(TypedDict):
    name: str
    gpu_model: str
    gpus_per_node: int
    on_demand_price_per_gpu_hour: str
    spot_price_per_gpu_hour: str
    allocations: list[Allocation]


class LogLine(TypedDict):
    id: int
    stream: str
    attempt: int
    seq: int
    ts: float
    text: str


class LogPage(TypedDict):
    job: int
    streams: list[str]
    lines: list[LogLine]
    next: NotRequired[str]
    more: bool


class MetricPoint(TypedDict):
    timestamp: str
    value: float
    sample_count: int


class MetricSeries(TypedDict):
    dimensions: dict[str, Any]
    label: str
    points: list[MetricPoint]


class MetricResult(TypedDict):
    job: int
    metric: str
    unit: str
    statistic: str
    period: int
    start: str
    end: str
    series: list[MetricSeries]
