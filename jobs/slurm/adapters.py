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
    description: str = ""  # state_description: Slurm's own sentence for the reason, when it has one
    account: str = ""
    comment: str = ""  # the console that submitted it says so here (jobs.slurm.batch_script.job_comment)
    user_name: str = ""  # the Unix user it runs as


@dataclass(frozen=True)
class AccountingView:
    """What slurmdbd says about a job (its last run: 22.05's REST API leaves requeued runs out and
    reports every exit code as 0, so per-run outcomes stay with the job completion records)."""

    job_id: int
    state: str
    account: str
    user: str
    elapsed_seconds: int | None
    allocated_tres: str  # "cpu=64,mem=2097152M,node=1,gres/gpu=4"
    start_time: datetime | None = None
    end_time: datetime | None = None
    nodes: tuple[str, ...] = ()


def _tres(items: Any) -> str:
    parts = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or item.get("count") in (None, 0):
            continue
        name = f"{item.get('type')}/{item['name']}" if item.get("name") else str(item.get("type"))
        parts.append(f"{name}={item['count']}{'M' if name == 'mem' else ''}")
    return ",".join(parts)


def _nodes(value: Any) -> tuple[str, ...]:
    try:
        return tuple(expand(str(value or "")))
    except HostlistError:
        return ()


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
        # slurmrestd 22.05 reads these as sbatch's options: `requeue: false` still gives Requeue=1
        # (only `no_requeue` clears it), and `exclusive` takes sbatch's words, not a boolean
        if job.get("requeue") is False:
            del job["requeue"]
            job["no_requeue"] = True
        if job.get("exclusive") is True:
            job["exclusive"] = "exclusive"
        elif job.get("exclusive") is False:
            del job["exclusive"]
        if "standard_output" in job and self.output_key != "standard_output":
            job[self.output_key] = job.pop("standard_output")
        return {"script": script, "job": job}

    def parse_job(self, raw: dict[str, Any]) -> SlurmJobView:
        nodes = _nodes(raw.get("nodes"))
        return SlurmJobView(
            job_id=int(raw["job_id"]), name=str(raw.get("name") or ""), state=_state(raw.get("job_state")),
            reason=str(raw.get("state_reason") or "None"), restart_count=int(raw.get("restart_cnt") or 0),
            nodes=nodes, partition=str(raw.get("partition") or ""),
            start_time=_time(raw.get("start_time")), end_time=_time(raw.get("end_time")),
            description=str(raw.get("state_description") or ""), account=str(raw.get("account") or ""),
            comment=str(raw.get("comment") or ""), user_name=str(raw.get("user_name") or ""),
        )


    @property
    def db_prefix(self) -> str:
        return f"/slurmdb/{self.version}"

    def parse_accounting(self, raw: dict[str, Any]) -> AccountingView:
        state = raw.get("state")
        time_field = raw.get("time")
        times: dict[str, Any] = time_field if isinstance(time_field, dict) else {}
        elapsed = times.get("elapsed")
        return AccountingView(
            job_id=int(raw["job_id"]), state=_state(state.get("current") if isinstance(state, dict) else state),
            account=str(raw.get("account") or ""), user=str(raw.get("user") or ""),
            elapsed_seconds=int(elapsed) if isinstance(elapsed, int | float) else None,
            allocated_tres=_tres((raw.get("tres") or {}).get("allocated")),
            start_time=_time(times.get("start")), end_time=_time(times.get("end")), nodes=_nodes(raw.get("nodes")),
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
