"""Slurm's view of a job → the console's next step: plain functions over plain data.

`decide()` reads one observation of a Slurm job (jobs.slurm.adapters.SlurmJobView; None when
slurmctld no longer knows it) with what the console knows (Local) and the job completion
record of the run that ended (jobs.slurm.jobcomp), and returns one Step. `jobs.slurm.sync`
carries it out through jobs.actions. The texts are what users read in the status reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..choices import JobStatus
from .adapters import SlurmJobView
from .jobcomp import CompletionRecord

# Slurm 22.05 job states as slurmrestd names them (base states and the flags it reports first)
WAITING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "SPECIAL_EXIT"})
STARTING_STATES = frozenset({"CONFIGURING", "POWER_UP_NODE"})  # allocated; nodes being readied
RUNNING_STATES = frozenset({"RUNNING", "SIGNALING", "RESIZING", "SUSPENDED", "STOPPED"})
ENDING_STATES = frozenset({"COMPLETING", "STAGE_OUT"})  # the run is over, the outcome not yet known
FAILURE_STATES = frozenset({
    "FAILED", "OUT_OF_MEMORY", "TIMEOUT", "DEADLINE", "BOOT_FAIL", "NODE_FAIL", "PREEMPTED", "CANCELLED",
    "REVOKED", "LAUNCH_FAILED",
})
FINAL_STATES = FAILURE_STATES | {"COMPLETED"}
ALL_STATES = WAITING_STATES | STARTING_STATES | RUNNING_STATES | ENDING_STATES | FINAL_STATES

MAX_FAILOVERS = 3  # as jobs.recovery.failover: the 4th interruption gives Pending - maxretriesexceeded


@dataclass(frozen=True)
class Shape:
    node_count: int
    gpus_per_node: int
    partition: str


# Slurm's pending reasons (squeue %r) a user may see, in words; any other is shown as Slurm names it.
_WAITING: dict[str, str] = {
    "None": "queued; Slurm has not looked at it yet",
    "Priority": "queued behind jobs of higher priority in partition {partition}",
    "Resources": "waiting for resources: {nodes} × {gpus} are not free yet in partition {partition}",
    "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions":
        "waiting for nodes of partition {partition}: some are down, drained for maintenance or reserved for "
        "higher-priority partitions; it starts when enough of them are back",
    "ReqNodeNotAvail": "waiting for nodes of partition {partition}: the ones it could use are down, drained for "
                       "maintenance or reserved; it starts when they are back",
    "BeginTime": "requeued; Slurm lets it start again after its requeue delay",
    "Dependency": "waiting for the jobs it depends on",
    "DependencyNeverSatisfied": "a job it depends on can never finish as required",
    "PartitionDown": "partition {partition} is down; it starts when an operator brings it up",
    "PartitionInactive": "partition {partition} is inactive",
    "PartitionNodeLimit": "partition {partition} cannot give it {nodes} now: fewer of its nodes are up (the others "
                          "drained or down), or its MaxNodes is lower; it starts when enough nodes are back",
    "PartitionTimeLimit": "its time limit is longer than partition {partition} allows (MaxTime)",
    "PartitionConfig": "partition {partition} cannot run it as configured now (more nodes than it has up, or a "
                       "limit it exceeds); it starts when the partition can",
    "Reservation": "waiting for its Slurm reservation to start",
    "Licenses": "waiting for licenses",
    "NodeDown": "a node it needs is down",
    "BadConstraints": "its constraints can never be satisfied in partition {partition}",
    "Cleaning": "Slurm is still cleaning up its previous run",
    "Prolog": "the nodes' prolog is running",
    "JobArrayTaskLimit": "the array's task limit is reached",
    "InvalidAccount": "its Slurm account {account}is invalid or has no access to partition {partition}",
    "InvalidQOS": "its Slurm QOS is invalid for its account",
    "FrontEndDown": "no front-end node is available",
    "SystemFailure": "Slurm reports a system failure",
}
# Holds: the job never starts by itself; an operator releases it.
RELEASE_HINT = "an operator releases it in the admin (Slurm jobs → Release held jobs) or with scontrol release {job}"
_HELD: dict[str, str] = {
    "JobHeldAdmin": "held by a Slurm administrator",
    "JobHeldUser": "held in Slurm by its submitter",
    "launch failed requeued held": "held by Slurm after its batch script failed to launch on a node (check the node first)",
    "job requeued in held state": "requeued by Slurm in held state",
}
HELD_STATES = frozenset({"REQUEUE_HOLD", "RESV_DEL_HOLD"})
# Slurm's accounting limits (QOSMaxGRESPerUser, AssocGrpGRES, …) all read alike
_LIMIT_PREFIXES = ("QOS", "Assoc", "MaxRequeue")


def reason_code(reason: str) -> str:
    """Slurm's reason without its detail: "ReqNodeNotAvail, UnavailableNodes:n1" → "ReqNodeNotAvail"."""
    return reason.split(",", 1)[0].strip() or "None"


def is_held(state: str, reason: str, description: str = "") -> bool:
    """Slurm will not start it until someone releases it."""
    code = reason_code(reason)
    return state in HELD_STATES or code in _HELD or description in _HELD or "held" in description.lower()


def waiting_text(reason: str, shape: Shape, description: str = "", job: int | str = "<id>", account: str = "",
                 state: str = "PENDING") -> str:
    """Why Slurm keeps it queued, in words. `description` is Slurm's state_description (it names
    drained nodes when the reason alone says only "Resources")."""
    code = reason_code(reason)
    nodes = f"{shape.node_count} node" + ("" if shape.node_count == 1 else "s")
    gpus = f"{shape.gpus_per_node} GPU" + ("" if shape.gpus_per_node == 1 else "s")
    if is_held(state, reason, description):
        what = _HELD.get(code) or _HELD.get(description) or f"held in Slurm ({description or reason})"
        return f"{what}: it does not start until {RELEASE_HINT.format(job=job)}"
    template = _WAITING.get(code)
    if code == "Resources" and description in _WAITING:
        template = _WAITING[description]  # Slurm's own words: nodes are drained, not busy
    if template is None and code.startswith(_LIMIT_PREFIXES):
        template = "held back by a Slurm limit of its account or QOS ({reason}); it starts when usage drops below it"
    if template is None:
        template = "waiting in Slurm ({reason})"
    return template.format(partition=shape.partition or "(default)", nodes=nodes, gpus=gpus, reason=reason,
                           account=f"{account} " if account else "")


def _nodes(names: tuple[str, ...]) -> str:
    return ", ".join(names) if names else "its nodes"


def interruption_text(state: str, nodes: tuple[str, ...], down: tuple[str, ...] = ()) -> str:
    """Why Slurm requeued a run (the state of its completion record)."""
    if state == "NODE_FAIL":
        failed = down or nodes
        return f"node {_nodes(failed)} failed (Slurm NODE_FAIL)"
    if state == "PREEMPTED":
        return "preempted by on-demand work in a higher-priority partition (Slurm PREEMPTED)"
    if state == "BOOT_FAIL":
        return f"node {_nodes(nodes)} failed to boot (Slurm BOOT_FAIL)"
    if state:
        return f"Slurm requeued it after {state}"
    return "Slurm requeued it"


def failure_text(state: str, nodes: tuple[str, ...], exit_code: int | None, exit_signal: int | None) -> str:
    """Why a run that ended for good did not succeed, in Slurm's terms."""
    code = f"exit code {exit_code}" + (f", signal {exit_signal}" if exit_signal else "") if exit_code is not None else ""
    texts = {
        "FAILED": f"the command failed on {_nodes(nodes)} (Slurm FAILED{', ' + code if code else ''})",
        "OUT_OF_MEMORY": f"out of memory: the job exceeded its memory on {_nodes(nodes)} (Slurm OUT_OF_MEMORY)",
        "TIMEOUT": "time limit reached: Slurm stopped it at its time limit (Slurm TIMEOUT)",
        "DEADLINE": "deadline reached (Slurm DEADLINE)",
        "BOOT_FAIL": f"node {_nodes(nodes)} failed to boot (Slurm BOOT_FAIL)",
        "NODE_FAIL": f"node failure on {_nodes(nodes)} (Slurm NODE_FAIL)",
        "PREEMPTED": "preempted and not requeued (Slurm PREEMPTED)",
        "CANCELLED": "cancelled in Slurm outside the console (scancel by an operator or a Slurm limit)",
        "REVOKED": "revoked by Slurm (it ran on another cluster of the federation)",
        "LAUNCH_FAILED": f"Slurm could not launch the batch script on {_nodes(nodes)} (Slurm LAUNCH_FAILED)",
    }
    return texts.get(state, f"ended in Slurm state {state}")


class Action(StrEnum):
    NOTHING = "nothing"
    WAIT = "wait"  # still queued: show the reason
    START_RUN = "start_run"  # allocated: a new attempt (Creating)
    COMPLETE = "complete"
    FAIL = "fail"
    FAILOVER = "failover"  # requeued after a node failure: Pending - failoverinprogress
    PAUSE = "pause"  # a spot job requeued (preempted): Pending - spotinterrupted
    MAX_RETRIES = "max_retries"  # a 4th requeue: cancel, Pending - maxretriesexceeded
    CANCEL = "cancel"  # scancel (the job is being deleted, or gave up while Slurm would run it again)
    REMOVE = "remove"  # deleted and Slurm has ended it: remove the row


@dataclass(frozen=True)
class Local:
    """What the console knows about the job."""

    status: str
    spot: bool
    failover_enabled: bool
    failover_count: int
    run_restart: int | None  # Slurm restart count of the current attempt's run; None before the first
    run_open: bool  # the current attempt has not ended


@dataclass(frozen=True)
class Step:
    action: Action
    reason: str = ""


_TERMINAL = {
    JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.INTERNAL_ERROR,
    JobStatus.MAX_RETRIES_EXCEEDED, JobStatus.IMAGE_PULL_BACKOFF,
}


def _interrupted(local: Local, cause: str) -> Step:
    if local.spot:
        return Step(Action.PAUSE, cause)
    if not local.failover_enabled:
        return Step(Action.FAIL, f"{cause}; Job Failover is off")
    if local.failover_count >= MAX_FAILOVERS:
        return Step(Action.MAX_RETRIES, f"{MAX_FAILOVERS} failovers done; not running it again after {cause}")
    return Step(Action.FAILOVER, cause)


def decide(view: SlurmJobView | None, local: Local, shape: Shape, record: CompletionRecord | None = None,
           down_nodes: tuple[str, ...] = ()) -> Step:
    """The next step for one job. `record` is the newest completion record of its Slurm job (the
    run that ended last), `down_nodes` the nodes slurmctld marks down (evidence of a node failure)."""
    alive = view is not None and view.state not in FINAL_STATES
    if local.status == JobStatus.TERMINATING:
        return Step(Action.CANCEL) if alive else Step(Action.REMOVE, "Slurm ended the job")
    if local.status in _TERMINAL:
        return Step(Action.CANCEL) if alive else Step(Action.NOTHING)
    restart: int | None
    if view is not None:
        state, restart = view.state, view.restart_count
    elif record is not None:
        state, restart = record.state, local.run_restart
    else:
        return Step(Action.FAIL, "Slurm no longer knows the job and left no completion record")
    if local.run_restart is not None and restart is not None and restart < local.run_restart:
        return Step(Action.NOTHING, "an older view than the run the console knows")  # read before a redemption
    # Slurm counts every requeue; a state alone could be a view read just before the run started
    if local.run_open and local.run_restart is not None and restart is not None and restart > local.run_restart:
        ended = record.state if record is not None else ""
        nodes = record.nodes if record is not None else ()
        return _interrupted(local, interruption_text(ended, nodes, tuple(n for n in down_nodes if n in nodes)))
    if state in WAITING_STATES:
        if local.run_open:
            return Step(Action.NOTHING, "a view read just before the run started")
        if view is None:
            return Step(Action.WAIT, waiting_text("None", shape))
        return Step(Action.WAIT, waiting_text(view.reason, shape, view.description, view.job_id, view.account, view.state))
    if state in STARTING_STATES | RUNNING_STATES:
        if not local.run_open or local.run_restart != restart:
            return Step(Action.START_RUN)
        return Step(Action.NOTHING)
    if state in ENDING_STATES:
        return Step(Action.NOTHING)
    if state == "COMPLETED":
        return Step(Action.COMPLETE, "Slurm: every node's command exited with code 0 (COMPLETED)")
    if state in FAILURE_STATES:
        nodes = record.nodes if record is not None else (view.nodes if view is not None else ())
        code = record.exit_code if record is not None else None
        signal = record.exit_signal if record is not None else None
        text = failure_text(state, nodes, code, signal)
        if state == "NODE_FAIL" and local.spot:
            return Step(Action.FAIL, text + "; Slurm did not requeue it")
        if state == "NODE_FAIL" and not local.failover_enabled:
            text += "; Job Failover is off"
        return Step(Action.FAIL, text)
    return Step(Action.NOTHING, f"unknown Slurm state {state!r}")
