"""Slurm's job completion records (`JobCompType=jobcomp/filetxt`): the exit codes the console trusts.

Slurm 22.05's REST API reports a failed job's exit code as success in places (see
../shared/reference/slurm.md), so the outcome of a run is read from these records instead. One
line per ended run: a requeued job leaves a PREEMPTED or NODE_FAIL line per interrupted run,
then its final one. Times are slurmctld's local time; read here in the console's local time
zone (run both in UTC).
"""

from __future__ import annotations

import os
import re
import threading
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


class Follower:
    """Follows one growing jobcomp file: each call reads only the bytes added since the last one.

    slurmctld appends a line per ended run; the poll asks every few seconds, so re-reading a file
    that grows for years would not do. A rotated file (new inode, or shorter than what was read)
    is read from its start; records already seen are kept and not repeated.
    """

    MAX_JOBS = 100_000  # records of the newest this many Slurm jobs are kept in memory

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.inode: int | None = None
        self.records: dict[int, list[CompletionRecord]] = {}
        self.lock = threading.Lock()  # Celery's thread pool may run two passes of one cluster

    def records_for(self, job_ids: Iterable[int]) -> dict[int, list[CompletionRecord]]:
        with self.lock:
            self._catch_up()
            return {job_id: list(self.records[job_id]) for job_id in job_ids if job_id in self.records}

    def _catch_up(self) -> None:
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return
        if stat.st_ino != self.inode or stat.st_size < self.offset:
            self.inode, self.offset = stat.st_ino, 0
        if stat.st_size == self.offset:
            return
        with open(self.path, "rb") as file:
            file.seek(self.offset)
            data = file.read(stat.st_size - self.offset)
        complete = data.rfind(b"\n") + 1  # a line slurmctld is still writing waits for the next call
        self.offset += complete
        for line in data[:complete].decode("utf-8", errors="replace").splitlines():
            record = parse_line(line)
            if record is None:
                continue
            runs = self.records.setdefault(record.job_id, [])
            if record not in runs:
                runs.append(record)
        while len(self.records) > self.MAX_JOBS:
            self.records.pop(next(iter(self.records)))


_followers: dict[str, Follower] = {}
_followers_lock = threading.Lock()


def read(path: str, job_ids: Iterable[int]) -> dict[int, list[CompletionRecord]]:
    """Records of these jobs in the file at `path`, oldest first; none when it does not exist (yet)."""
    with _followers_lock:
        follower = _followers.setdefault(str(Path(path)), Follower(str(Path(path))))
    return follower.records_for(job_ids)
