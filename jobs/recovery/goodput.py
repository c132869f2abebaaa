"""What failed, where, and what it cost (plain arithmetic over attempt times, no Django).

A job's wall time runs from its first placement to its end (or now). Each interruption of an
attempt N, resumed by attempt N+1, loses time in five parts, one after the other:

- detection: from the fault to the console acting on it (the attempt's end): a node's last
  heartbeat or its connection closing, a GPU's XID, a process's exit;
- rescheduling: from then to N+1 being placed (the old placements stopping, a failover's
  assessment, waiting for capacity);
- preparation: from N+1's placement to its training code starting to load the checkpoint
  (environment, workdir, process start), or to its process running when no load was seen;
- checkpoint load: as the platform's checkpoint library reports it (CHECKPOINT_LOADED_MARKER);
- steps redone: the progress N made after the checkpoint N+1 resumed from, done again.

Productive time is each attempt's training time (from its checkpoint loaded, or its process
running, to its fault or end) less the steps redone; goodput is productive / wall time.
Whose fault: the platform's (hardware, a lost node, capacity reclaimed) or the user's (their
code failed, their image) — as the failover decision classified it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

# printed by the platform's checkpoint library when a resume's checkpoint is loaded
# (nodeagent/vendor/concurrent_checkpoint/engine.py); its log line's time is when it finished
CHECKPOINT_LOADED_MARKER = "[Concurrent Checkpoint] loaded step"
_LOADED = re.compile(re.escape(CHECKPOINT_LOADED_MARKER) + r" (\d+) in ([0-9.]+) s")
PLATFORM, USER = "platform", "user"


def loaded_seconds(line: str) -> float | None:
    """The load time a CHECKPOINT_LOADED_MARKER line reports, or None for any other line."""
    found = _LOADED.search(line)
    return float(found.group(2)) if found else None


@dataclass(frozen=True)
class AttemptTimes:
    number: int
    created_at: datetime  # placed
    running_at: datetime | None = None  # its processes ran
    ended_at: datetime | None = None  # the console ended it (acted on its fault)
    fault_at: datetime | None = None  # when the fault happened, as well as the console knows
    fault_by: str = ""  # PLATFORM or USER; "" for an attempt that did not fail
    fault_node: str = ""
    cause: str = ""
    resume_checkpoint_at: datetime | None = None  # when the checkpoint it resumed from was durable
    loaded_at: datetime | None = None  # when its checkpoint load finished (the library's line)
    load_seconds: float | None = None

    @property
    def training_from(self) -> datetime | None:
        """When its training proper began: its checkpoint loaded, else its processes running."""
        return self.loaded_at or self.running_at


@dataclass(frozen=True)
class Loss:
    """The time one interruption cost (seconds), and whose fault it was."""

    attempt: int  # the interrupted attempt
    fault_by: str
    fault_node: str
    cause: str
    detection: float
    rescheduling: float
    preparation: float
    checkpoint_load: float
    steps_redone: float

    @property
    def total(self) -> float:
        return self.detection + self.rescheduling + self.preparation + self.checkpoint_load + self.steps_redone

    @property
    def charged(self) -> float:
        """Seconds of it billed to the user: none for the platform's faults (the redone tail is
        credited and no node is held between attempts); a user's fault is theirs."""
        return 0.0 if self.fault_by == PLATFORM else self.steps_redone


def _seconds(start: datetime | None, end: datetime | None) -> float:
    if start is None or end is None:
        return 0.0
    return max(0.0, (end - start).total_seconds())


def losses(attempts: Sequence[AttemptTimes], now: datetime) -> list[Loss]:
    """One Loss per interrupted attempt (in number order); the newest one's parts still grow
    while its successor is not placed or has not started training."""
    ordered = sorted(attempts, key=lambda a: a.number)
    found = []
    for index, attempt in enumerate(ordered):
        if not attempt.fault_by or attempt.ended_at is None:
            continue
        after = ordered[index + 1] if index + 1 < len(ordered) else None
        fault = attempt.fault_at or attempt.ended_at
        if fault > attempt.ended_at:
            fault = attempt.ended_at
        placed = after.created_at if after else None
        load = after.load_seconds if after and after.load_seconds is not None else 0.0
        load_started = None
        if after is not None:
            load_started = (after.loaded_at - timedelta(seconds=load)) if after.loaded_at else after.running_at
        redone_from = attempt.training_from
        if after is not None and after.resume_checkpoint_at is not None and redone_from is not None:
            redone_from = max(redone_from, after.resume_checkpoint_at)
        found.append(Loss(
            attempt=attempt.number, fault_by=attempt.fault_by, fault_node=attempt.fault_node, cause=attempt.cause,
            detection=_seconds(fault, attempt.ended_at),
            rescheduling=_seconds(attempt.ended_at, placed or now),
            preparation=_seconds(placed, load_started or now) if placed else 0.0,
            checkpoint_load=load,
            steps_redone=_seconds(redone_from, fault) if after is not None and after.training_from else 0.0,
        ))
    return found


@dataclass(frozen=True)
class Goodput:
    wall: float  # seconds from the first placement to the end (or now)
    productive: float  # training time less the steps redone
    lost: list[Loss]

    @property
    def ratio(self) -> float | None:
        return self.productive / self.wall if self.wall > 0 else None


def goodput(attempts: Sequence[AttemptTimes], now: datetime, ended_at: datetime | None = None) -> Goodput:
    """The job's goodput so far: productive training time over wall time (see the module)."""
    ordered = sorted(attempts, key=lambda a: a.number)
    if not ordered:
        return Goodput(0.0, 0.0, [])
    end = ended_at or now
    lost = losses(ordered, end)
    trained = 0.0
    for attempt in ordered:
        stop = min(t for t in (attempt.fault_at, attempt.ended_at, end) if t is not None)
        trained += _seconds(attempt.training_from, stop)
    productive = max(0.0, trained - sum(loss.steps_redone for loss in lost))
    return Goodput(_seconds(ordered[0].created_at, end), productive, lost)
