"""Slurm's view of a job → the console's next step: every Slurm state and pending reason it handles."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from jobs.choices import JobStatus as S
from jobs.slurm.adapters import SlurmJobView, adapter_for
from jobs.slurm.jobcomp import CompletionRecord
from jobs.slurm.states import (
    _WAITING,
    ALL_STATES,
    ENDING_STATES,
    FAILURE_STATES,
    HELD_STATES,
    RUNNING_STATES,
    STARTING_STATES,
    WAITING_STATES,
    Action,
    Local,
    Shape,
    decide,
    failure_text,
    interruption_text,
    waiting_text,
)

SHAPE = Shape(node_count=2, gpus_per_node=8, partition="gpu")
QUEUED = Local(status=S.PENDING, spot=False, failover_enabled=False, failover_count=0, run_restart=None, run_open=False)
RUNNING = Local(status=S.RUNNING, spot=False, failover_enabled=False, failover_count=0, run_restart=0, run_open=True)


def view(state: str, reason: str = "None", restart: int = 0, nodes: tuple[str, ...] = ("n1", "n2")) -> SlurmJobView:
    return SlurmJobView(job_id=7, name="simpleai-1-x", state=state, reason=reason, restart_count=restart, nodes=nodes)


def record(state: str, code: int | None = 0, signal: int | None = 0, nodes: tuple[str, ...] = ("n1", "n2")) -> CompletionRecord:
    return CompletionRecord(7, state, nodes, None, None, code, signal)


def test_the_state_groups_cover_every_state_once():
    groups = [WAITING_STATES, STARTING_STATES, RUNNING_STATES, ENDING_STATES, FAILURE_STATES, {"COMPLETED"}]
    assert sum(len(g) for g in groups) == len(ALL_STATES)


@pytest.mark.parametrize("state", sorted(ALL_STATES))
@pytest.mark.parametrize("local", [QUEUED, RUNNING], ids=["queued", "running"])
def test_every_slurm_state_gets_a_decision_that_is_not_unknown(state, local):
    step = decide(view(state), local, SHAPE, record(state) if state in FAILURE_STATES | {"COMPLETED"} else None)
    assert "unknown Slurm state" not in step.reason


@pytest.mark.parametrize("state", sorted(WAITING_STATES - HELD_STATES))
def test_a_queued_job_shows_why_it_waits(state):
    step = decide(view(state, "Resources"), QUEUED, SHAPE)
    assert step.action is Action.WAIT
    assert step.reason == "waiting for resources: 2 nodes × 8 GPUs are not free yet in partition gpu"


@pytest.mark.parametrize("reason", sorted(r for r in _WAITING if "," not in r))
def test_every_known_pending_reason_reads_as_words(reason):
    text = waiting_text(reason, SHAPE)
    assert text and "{" not in text
    assert reason not in text or reason in ("None",)  # Slurm's code is translated, not repeated


@pytest.mark.parametrize(("reason", "expected"), [
    ("Priority", "queued behind jobs of higher priority in partition gpu"),
    ("QOSMaxGRESPerUser", "held back by a Slurm limit of its account or QOS (QOSMaxGRESPerUser); it starts when usage "
                          "drops below it"),
    ("AssocGrpGRES", "held back by a Slurm limit of its account or QOS (AssocGrpGRES); it starts when usage drops below it"),
    ("SomethingNew", "waiting in Slurm (SomethingNew)"),
    ("BeginTime", "requeued; Slurm lets it start again after its requeue delay"),
    ("ReqNodeNotAvail, UnavailableNodes:n1", "waiting for nodes of partition gpu: the ones it could use are down, drained "
                                             "for maintenance or reserved; it starts when they are back"),
    ("PartitionNodeLimit", "partition gpu cannot give it 2 nodes now: fewer of its nodes are up (the others drained or "
                           "down), or its MaxNodes is lower; it starts when enough nodes are back"),
])
def test_limits_and_unknown_reasons_still_say_something(reason, expected):
    assert waiting_text(reason, SHAPE) == expected


def test_resources_that_are_drained_nodes_say_so_in_slurms_words():
    drained = "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
    text = waiting_text("Resources", SHAPE, drained)
    assert text.startswith("waiting for nodes of partition gpu: some are down, drained for maintenance")


@pytest.mark.parametrize(("state", "reason", "expected"), [
    ("PENDING", "JobHeldAdmin", "held by a Slurm administrator"),
    ("PENDING", "JobHeldUser", "held in Slurm by its submitter"),
    ("PENDING", "launch failed requeued held", "held by Slurm after its batch script failed to launch on a node"),
    ("REQUEUE_HOLD", "None", "held in Slurm (None)"),
])
def test_a_held_job_says_it_is_held_and_how_it_is_released(state, reason, expected):
    for local in (QUEUED, dataclasses.replace(QUEUED, status=S.FAILOVER_IN_PROGRESS, failover_enabled=True)):
        step = decide(dataclasses.replace(view(state, reason), nodes=()), local, SHAPE)
        assert step.action is Action.WAIT
        assert step.reason.startswith(expected)
        assert step.reason.endswith("it does not start until an operator releases it in the admin (Slurm jobs → "
                                    "Release held jobs) or with scontrol release 7")


def test_one_node_one_gpu_is_said_in_the_singular():
    assert waiting_text("Resources", Shape(1, 1, "p")) == "waiting for resources: 1 node × 1 GPU are not free yet in partition p"


@pytest.mark.parametrize("state", sorted(STARTING_STATES | RUNNING_STATES))
def test_an_allocation_starts_a_run_once(state):
    assert decide(view(state), QUEUED, SHAPE).action is Action.START_RUN
    assert decide(view(state), RUNNING, SHAPE).action is Action.NOTHING


@pytest.mark.parametrize("state", sorted(ENDING_STATES))
def test_a_run_that_is_ending_waits_for_its_outcome(state):
    assert decide(view(state), RUNNING, SHAPE).action is Action.NOTHING


def test_a_completed_job_completes():
    assert decide(view("COMPLETED"), RUNNING, SHAPE, record("COMPLETED")).action is Action.COMPLETE


@pytest.mark.parametrize(("state", "expected"), [
    ("FAILED", "the command failed on n1, n2 (Slurm FAILED, exit code 3)"),
    ("OUT_OF_MEMORY", "out of memory: the job exceeded its memory on n1, n2 (Slurm OUT_OF_MEMORY)"),
    ("TIMEOUT", "time limit reached: Slurm stopped it at its time limit (Slurm TIMEOUT)"),
    ("DEADLINE", "deadline reached (Slurm DEADLINE)"),
    ("BOOT_FAIL", "node n1, n2 failed to boot (Slurm BOOT_FAIL)"),
    ("NODE_FAIL", "node failure on n1, n2 (Slurm NODE_FAIL); Job Failover is off"),
    ("PREEMPTED", "preempted and not requeued (Slurm PREEMPTED)"),
    ("CANCELLED", "cancelled in Slurm outside the console (scancel by an operator or a Slurm limit)"),
    ("REVOKED", "revoked by Slurm (it ran on another cluster of the federation)"),
    ("LAUNCH_FAILED", "Slurm could not launch the batch script on n1, n2 (Slurm LAUNCH_FAILED)"),
])
def test_every_failure_state_fails_the_job_with_its_reason(state, expected):
    step = decide(view(state), RUNNING, SHAPE, record(state, code=3 if state == "FAILED" else 0))
    assert step.action is Action.FAIL
    assert step.reason == expected


def test_the_exit_code_and_signal_come_from_the_completion_record():
    assert failure_text("FAILED", ("n2",), 1, 9) == "the command failed on n2 (Slurm FAILED, exit code 1, signal 9)"
    assert failure_text("FAILED", ("n2",), None, None) == "the command failed on n2 (Slurm FAILED)"


def test_a_job_slurm_forgot_ends_by_its_last_record():
    assert decide(None, RUNNING, SHAPE, record("COMPLETED")).action is Action.COMPLETE
    step = decide(None, RUNNING, SHAPE, None)
    assert step.action is Action.FAIL and "no completion record" in step.reason


# -- requeues -----------------------------------------------------------------------------------
SPOT = dataclasses.replace(RUNNING, spot=True)
FAILOVER = dataclasses.replace(RUNNING, failover_enabled=True)


def test_a_preempted_spot_job_pauses():
    step = decide(view("PENDING", "BeginTime", restart=1, nodes=()), SPOT, SHAPE, record("PREEMPTED"))
    assert step.action is Action.PAUSE
    assert step.reason == "preempted by on-demand work in a higher-priority partition (Slurm PREEMPTED)"


def test_a_node_failure_fails_a_failover_job_over_naming_the_node_slurm_marks_down():
    step = decide(view("PENDING", "BeginTime", restart=1, nodes=()), FAILOVER, SHAPE, record("NODE_FAIL"), down_nodes=("n2",))
    assert step.action is Action.FAILOVER
    assert step.reason == "node n2 failed (Slurm NODE_FAIL)"


def test_a_requeue_seen_only_when_the_job_runs_again_still_ends_the_old_run_first():
    step = decide(view("RUNNING", restart=1), FAILOVER, SHAPE, record("NODE_FAIL"))
    assert step.action is Action.FAILOVER


def test_the_fourth_interruption_gives_up():
    local = dataclasses.replace(FAILOVER, failover_count=3)
    step = decide(view("PENDING", restart=1, nodes=()), local, SHAPE, record("NODE_FAIL"))
    assert step.action is Action.MAX_RETRIES
    assert step.reason.startswith("3 failovers done; not running it again after node n1, n2 failed")


def test_a_requeue_of_a_job_without_failover_fails_it():
    step = decide(view("PENDING", restart=1, nodes=()), RUNNING, SHAPE, record("NODE_FAIL"))
    assert step.action is Action.FAIL and step.reason.endswith("; Job Failover is off")


def test_a_held_requeue_of_a_running_job_counts_as_an_interruption():
    assert decide(view("REQUEUE_HOLD", "JobHeldAdmin", restart=1), SPOT, SHAPE).action is Action.PAUSE


def test_a_view_read_just_before_the_run_started_changes_nothing():
    # the poll read PENDING; meanwhile the batch step redeemed its token and the run began
    assert decide(view("PENDING", "Resources", nodes=()), RUNNING, SHAPE).action is Action.NOTHING
    # the poll read the old run; meanwhile a redemption ended it and began run 1
    later = dataclasses.replace(FAILOVER, run_restart=1)
    assert decide(view("RUNNING", restart=0), later, SHAPE).action is Action.NOTHING


def test_after_the_interruption_the_next_run_starts_a_new_attempt():
    paused = dataclasses.replace(SPOT, status=S.SPOT_INTERRUPTED, run_open=False)
    assert decide(view("PENDING", "BeginTime", restart=1, nodes=()), paused, SHAPE).action is Action.WAIT
    assert decide(view("RUNNING", restart=1), paused, SHAPE).action is Action.START_RUN


@pytest.mark.parametrize(("state", "nodes", "expected"), [
    ("NODE_FAIL", ("n1", "n2"), "node n1, n2 failed (Slurm NODE_FAIL)"),
    ("BOOT_FAIL", ("n3",), "node n3 failed to boot (Slurm BOOT_FAIL)"),
    ("", (), "Slurm requeued it"),
    ("CANCELLED", (), "Slurm requeued it after CANCELLED"),
])
def test_interruptions_say_why(state, nodes, expected):
    assert interruption_text(state, nodes) == expected


# -- deletion and jobs that are over ----------------------------------------------------------
def test_a_deleted_job_is_cancelled_until_slurm_has_ended_it():
    deleting = dataclasses.replace(RUNNING, status=S.TERMINATING)
    assert decide(view("RUNNING"), deleting, SHAPE).action is Action.CANCEL
    assert decide(view("COMPLETING"), deleting, SHAPE).action is Action.CANCEL
    assert decide(view("CANCELLED"), deleting, SHAPE).action is Action.REMOVE
    assert decide(None, deleting, SHAPE).action is Action.REMOVE


def test_a_job_the_console_gave_up_on_is_cancelled_if_slurm_would_still_run_it():
    over = dataclasses.replace(RUNNING, status=S.MAX_RETRIES_EXCEEDED)
    assert decide(view("PENDING"), over, SHAPE).action is Action.CANCEL
    assert decide(view("CANCELLED"), over, SHAPE).action is Action.NOTHING


# -- what slurmrestd says, per API version ---------------------------------------------------
RAW = {"job_id": 7, "name": "simpleai-1-x", "job_state": "RUNNING", "state_reason": "None", "restart_cnt": 2,
       "nodes": "n[1-2]", "partition": "gpu", "start_time": 1796065712, "end_time": 6091033208, "exit_code": 1792}


@pytest.mark.parametrize("version", ["v0.0.36", "v0.0.37", "v0.0.38"])
def test_a_job_reads_the_same_in_every_api_version(version):
    parsed = adapter_for(version).parse_job(RAW)
    assert parsed == SlurmJobView(7, "simpleai-1-x", "RUNNING", "None", 2, ("n1", "n2"), "gpu",
                                  datetime.fromtimestamp(1796065712, tz=UTC), None)


def test_newer_shapes_of_state_and_time_are_understood():
    raw = {**RAW, "job_state": ["PENDING", "REQUEUED"], "start_time": {"set": True, "number": 1796065712}}
    parsed = adapter_for("v0.0.38").parse_job(raw)
    assert parsed.state == "PENDING" and parsed.start_time is not None
