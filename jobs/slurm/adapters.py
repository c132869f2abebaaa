"""One adapter per slurmrestd API version: the JSON shapes differ between Slurm releases.

Plain functions over plain data. An adapter knows its version's URL prefix, turns the
version-neutral submission properties (jobs.slurm.batch_script.submission) into its JSON, and
reads a job of its JSON into a SlurmJobView. Slurm 22.05 offers v0.0.36, v0.0.37 and v0.0.38;
a newer Slurm needs a new adapter (v0.0.39 changed job states to lists and times to objects).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .hostlist import HostlistError, expand

# a pending job's end_time is its time limit from now (or far in the future): not an end
_FAR_FUTURE = 4102444800  # 2100-01-01


@dataclass(frozen=True)
class SlurmJobView:
    """What slurmrestd says about one job."""

    job_id: int
    name: str
    state: str  # PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, NODE_FAIL, PREEMPTED, ...
    reason: str  # state_reason: None, Resources, Priority, BeginTime, NonZeroExitCode, ...
    restart_count: int  # how often Slurm requeued it (0 for the first run)
    nodes: tuple[str, ...]  # the allocation, first host first; empty while pending
    partition: str = ""
    start_time: datetime | None = None
    end_time: datetime | None = None


def _time(value: Any) -> datetime | None:
    if isinstance(value, dict):  # newer versions: {"set": true, "number": N}
        value = value.get("number") if value.get("set", True) else None
    if not isinstance(value, int | float) or value <= 0 or value >= _FAR_FUTURE:
        return None
    return datetime.fromtimestamp(value, tz=UTC)


def _state(value: Any) -> str:
    if isinstance(value, list):  # newer versions: ["PENDING", "REQUEUED"]
        value = value[0] if value else ""
    return str(value or "").upper()


class Adapter:
    version = ""
    output_key = "standard_output"

    @property
    def prefix(self) -> str:
        return f"/slurm/{self.version}"

    def submit_body(self, script: str, properties: dict[str, Any]) -> dict[str, Any]:
        job = dict(properties)
        if "standard_output" in job and self.output_key != "standard_output":
            job[self.output_key] = job.pop("standard_output")
        return {"script": script, "job": job}

    def parse_job(self, raw: dict[str, Any]) -> SlurmJobView:
        try:
            nodes = tuple(expand(str(raw.get("nodes") or "")))
        except HostlistError:
            nodes = ()
        return SlurmJobView(
            job_id=int(raw["job_id"]), name=str(raw.get("name") or ""), state=_state(raw.get("job_state")),
            reason=str(raw.get("state_reason") or "None"), restart_count=int(raw.get("restart_cnt") or 0),
            nodes=nodes, partition=str(raw.get("partition") or ""),
            start_time=_time(raw.get("start_time")), end_time=_time(raw.get("end_time")),
        )


class V0038(Adapter):
    version = "v0.0.38"


class V0037(Adapter):
    version = "v0.0.37"


class V0036(Adapter):
    version = "v0.0.36"
    output_key = "standard_out"  # renamed standard_output in v0.0.37


ADAPTERS: dict[str, Adapter] = {adapter.version: adapter for adapter in (V0038(), V0037(), V0036())}
API_VERSIONS = tuple(ADAPTERS)


def adapter_for(version: str) -> Adapter:
    try:
        return ADAPTERS[version]
    except KeyError:
        raise ValueError(f"unsupported slurmrestd API version {version!r} (supported: {', '.join(API_VERSIONS)})") from None
