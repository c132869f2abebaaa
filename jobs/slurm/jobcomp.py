"""Slurm's job completion records (`JobCompType=jobcomp/filetxt`): the exit codes the console trusts.

Slurm 22.05's REST API reports a failed job's exit code as success in places (see
../shared/reference/slurm.md), so the outcome of a run is read from these records instead. One
line per ended run: a requeued job leaves a PREEMPTED or NODE_FAIL line per interrupted run,
then its final one. Times are slurmctld's local time; read here in the console's local time
zone (run both in UTC).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .hostlist import HostlistError, expand

_FIELD = re.compile(r"(\w+)=(.*?)(?=\s+\w+=|\s*$)")


@dataclass(frozen=True)
class CompletionRecord:
    job_id: int
    state: str  # COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED, OUT_OF_MEMORY, ...
    nodes: tuple[str, ...]
    start: datetime | None
    end: datetime | None
    exit_code: int | None  # the batch script's exit code
    exit_signal: int | None  # the signal that ended it, 0 for none


def _time(value: str) -> datetime | None:
    if not value or value in ("Unknown", "None"):
        return None
    try:
        return datetime.fromisoformat(value).astimezone()
    except ValueError:
        return None


def _exit(value: str) -> tuple[int | None, int | None]:
    code, _, sig = value.partition(":")
    if not code.isdigit():
        return None, None
    return int(code), int(sig) if sig.isdigit() else 0


def parse_line(line: str) -> CompletionRecord | None:
    """One record, or None for a line that is not one."""
    fields = dict(_FIELD.findall(line.strip()))
    if not fields.get("JobId", "").isdigit() or "JobState" not in fields:
        return None
    try:
        nodes = tuple(expand(fields.get("NodeList", "")))
    except HostlistError:
        nodes = ()
    code, sig = _exit(fields.get("ExitCode", ""))
    return CompletionRecord(
        job_id=int(fields["JobId"]), state=fields["JobState"].split()[0], nodes=nodes,
        start=_time(fields.get("StartTime", "")), end=_time(fields.get("EndTime", "")),
        exit_code=code, exit_signal=sig,
    )


def parse(lines: Iterable[str], job_ids: Iterable[int]) -> dict[int, list[CompletionRecord]]:
    """The records of these jobs, oldest first (one per ended run)."""
    wanted = set(job_ids)
    found: dict[int, list[CompletionRecord]] = defaultdict(list)
    for line in lines:
        # cheap filter first: the file holds every job of the cluster
        if "JobId=" not in line:
            continue
        record = parse_line(line)
        if record is not None and record.job_id in wanted:
            found[record.job_id].append(record)
    return dict(found)


def read(path: str, job_ids: Iterable[int]) -> dict[int, list[CompletionRecord]]:
    """Records from the file at `path`; none when it does not exist (yet)."""
    try:
        with open(Path(path), encoding="utf-8", errors="replace") as file:
            return parse(file, job_ids)
    except FileNotFoundError:
        return {}
