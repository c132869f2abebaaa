"""What agents' placement reports do to a job: plain data in, decisions out (no Django).

An agent reports each placement of a job `preparing`, `running` and `exited`. jobs.lifecycle
reads a job and its current attempt's placements (locked), asks `apply_reports` what a run of
reports does to them, and writes the answer for a whole batch of jobs in a few statements. The
rare decisions that need more than these rows (a failed placement's failover, the removal of a
job being deleted) are named as a follow-up: `apply_reports` stops after the report that asks
for one, and the caller runs it through the action that owns it before going on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from ..statuses import Status

PREPARING, RUNNING, EXITED = "preparing", "running", "exited"
HOLDING = frozenset({"assigned", PREPARING, RUNNING})  # jobs.models.attempts.HOLDING_STATES
RUNNABLE = frozenset({Status.CREATING, Status.RUNNING})  # a job whose current attempt should run



def running_reason(nodes: int) -> str:
    """The reason of Running, as true for a job of one node as of several."""
    return "The command runs on its node" if nodes == 1 else f"The command runs on all {nodes} nodes"


def completed_reason(nodes: int) -> str:
    return "The command exited with code 0" if nodes == 1 else "Every node's command exited with code 0"


@dataclass(frozen=True)
class PlacementReport:
    job_id: int
    attempt: int
    role: str
    state: str
    exit_code: int | None = None
    signal: int | None = None
    output_url: str = ""
    message: str = ""
    image_error: bool = False
    failure: str = ""  # protocol.PREPARATION_FAILURES: the agent, not the command, failed


@dataclass(frozen=True)
class Verdict:
    kind: Literal["ok", "stale", "refused"]
    reason: str = ""  # why it was refused


OK = Verdict("ok")
STALE = Verdict("stale")  # the attempt is not current (fenced) or the placement ended: changes nothing


def foreign_placement(job_id: int, attempt: int, role: str) -> str:
    """Why a write about a placement the sending node does not hold is refused."""
    return f"this node has no placement of job {job_id}, attempt {attempt}, as {role}"


@dataclass(frozen=True)
class JobRow:
    pk: int
    status: str  # as read: the reports' transitions say what it becomes
    current_attempt: int


@dataclass
class PlacementRow:
    """A placement of the job's current attempt."""

    pk: int
    node_id: int | None  # None: a Slurm run's, reported by its launcher
    role: str
    state: str
    exit_code: int | None = None
    exit_signal: int | None = None
    failure: str = ""
    output_url: str = ""
    message: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None


@dataclass(frozen=True)
class Transition:
    status: str
    reason: str
    result_url: str | None = None  # set with Completed: where the nodes' OUTPUT_DIRs went


@dataclass(frozen=True)
class FollowUp:
    """A decision the rows alone cannot make: `interrupted` (the placement's exit is a failure:
    failover, pause or fail) or `remove` (the last placement of a job being deleted ended)."""

    kind: Literal["interrupted", "remove"]
    placement: PlacementRow
    report: PlacementReport


@dataclass
class Applied:
    verdicts: list[Verdict] = field(default_factory=list)  # one per report consumed, in order
    changed: set[int] = field(default_factory=set)  # placements to write
    transitions: list[Transition] = field(default_factory=list)
    running: bool = False  # the attempt began running on every node
    ended: str = ""  # the attempt ended, with this cause
    freed: bool = False  # a placement stopped holding its GPUs
    follow_up: FollowUp | None = None  # set: apply stopped after the report that asked for it

    def status(self, job: JobRow) -> str:
        """The job's status after the reports applied so far."""
        return self.transitions[-1].status if self.transitions else job.status


def apply_reports(job: JobRow | None, placements: Sequence[PlacementRow],
                  reports: Sequence[tuple[int | None, PlacementReport]], now: datetime) -> Applied:
    """Apply `reports` ((sending node, report), in the order they were sent) to `job` (None: it
    is gone) and its current attempt's `placements`, in place. Stops after a report whose effect
    needs a follow-up; the verdicts say how many were consumed."""
    applied = Applied()
    for node_id, report in reports:
        applied.verdicts.append(_apply_one(job, placements, node_id, report, now, applied))
        if applied.follow_up is not None:
            break
    return applied


def _apply_one(job: JobRow | None, placements: Sequence[PlacementRow], node_id: int | None,
               report: PlacementReport, now: datetime, applied: Applied) -> Verdict:
    if job is None or job.current_attempt != report.attempt:
        return STALE
    placement = next((p for p in placements if p.role == report.role and p.node_id == node_id), None)
    if placement is None:
        return Verdict("refused", foreign_placement(report.job_id, report.attempt, report.role))
    if placement.state not in HOLDING:
        return STALE
    applied.changed.add(placement.pk)
    if report.state in (PREPARING, RUNNING):
        placement.state = report.state
        placement.started_at = placement.started_at or now
        if report.state == RUNNING and applied.status(job) == Status.CREATING and all(p.state == RUNNING for p in placements):
            applied.transitions.append(Transition(Status.RUNNING, running_reason(len(placements))))
            applied.running = True
        return OK
    placement.state = EXITED
    placement.exit_code, placement.exit_signal = report.exit_code, report.signal
    placement.output_url, placement.message = report.output_url, report.message[:1000]
    placement.failure = report.failure[:32]
    placement.ended_at = now
    applied.freed = True
    still_holding = any(p.state in HOLDING for p in placements)
    status = applied.status(job)
    if status == Status.TERMINATING:
        if not still_holding:
            applied.follow_up = FollowUp("remove", placement, report)
        return OK
    if status not in RUNNABLE:
        return OK  # already decided (failed, failed over, paused): another node stopping
    if placement.exit_code == 0 and not placement.exit_signal and not placement.failure:
        if not still_holding and all(p.exit_code == 0 for p in placements):
            outputs = sorted({p.output_url.rsplit("/", 2)[0] for p in placements if p.output_url})
            applied.transitions.append(Transition(Status.COMPLETED, completed_reason(len(placements)), outputs[0] + "/" if outputs else ""))
            applied.ended = "Completed"
        return OK
    applied.follow_up = FollowUp("interrupted", placement, report)
    return OK
