"""Runs of a Slurm job as attempts of its Training Job, their tokens, and the launchers' reports.

Like jobs.lifecycle for agents: callers hold the job row lock (select_for_update) inside a
transaction, and status changes go through jobs.actions. A run's placements have no Node row
(node = NULL, node_name = the Slurm node); they hold their GPUs from Slurm's start time of the
run to its end time, which is what the cost and usage pages charge.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from monitoring.models import LogLine
from nodeagent.protocol import stream_role

from .. import actions, console_log, lifecycle
from ..channel.placement_reports import PlacementReport
from ..models import JobAttempt, Placement, PlacementState, TrainingJob
from ..models.attempts import HOLDING_STATES, AttemptKind
from ..recovery.faults import PEER_FAILURE_PATTERNS, Decision, ExitEvidence, classify
from ..scheduling.decision import master_port
from ..storage import credentials
from .backend import request_pass
from .models import SlurmJob, SlurmRun, hash_secret

LOG_TAIL_LINES = 40
_LABELS = {AttemptKind.FAILOVER: "Failover", AttemptKind.SPOT_RESUME: "Spot resume"}


def begin_run(slurm_job: SlurmJob, job: TrainingJob, restart: int, nodes: tuple[str, ...],
              started_at: datetime | None, master_addr: str) -> SlurmRun:
    """Slurm allocated nodes to (a new run of) the job: the next attempt, in Creating."""
    kind = lifecycle.KIND_BY_STATUS[job.status]
    previous = JobAttempt.objects.filter(job=job, number=job.current_attempt).first()
    number = job.current_attempt + 1
    started_at = started_at or timezone.now()
    # the attempt's own object-storage keys (jobs.storage.credentials), as for the agents'; Slurm
    # runs the job already, so it starts even when they could not be made (its log says so)
    minted = credentials.mint([job])
    attempt = JobAttempt.objects.create(
        job=job, number=number, kind=kind, master_addr=master_addr, master_port=master_port(job.pk, number),
        resume_step=job.checkpoint_step, **credentials.attempt_fields(minted, job.pk),
    )
    Placement.objects.bulk_create([
        Placement(attempt=attempt, node=None, node_name=name, role=stream_role(rank), node_rank=rank,
                  gpu_indices=list(range(job.gpus_per_node)), started_at=started_at)
        for rank, name in enumerate(nodes)
    ])
    run = SlurmRun.objects.create(slurm_job=slurm_job, attempt=attempt, restart_count=restart, nodes=list(nodes),
                                  started_at=started_at)
    where = f"Slurm job {slurm_job.slurm_job_id} on {', '.join(nodes)}"
    if kind == AttemptKind.INITIAL:
        reason = f"{where}: allocated; starting the step launcher on every node"
    else:
        resume = f"checkpoint step {attempt.resume_step}" if attempt.resume_step is not None else "the start (no checkpoint was committed)"
        reason = f"{_LABELS[kind]}: {where} (restart {restart}), resuming from {resume}"
        cause = previous.cause if previous else ""
        for rank, name in enumerate(nodes):
            console_log.write(job.pk, stream_role(rank), number,
                              f"[{_LABELS[kind].upper()}] ==== attempt {number - 1} was interrupted ({cause}); "
                              f"attempt {number} on node {name}, resuming from {resume} ====", opening=True)
    for rank, name in enumerate(nodes):
        console_log.write(job.pk, stream_role(rank), number, f"[SLURM] {where}, partition "
                          f"{slurm_job.cluster.partition_for(job.learning_type)}; this node ({name}) is rank {rank}")
        if job.pk in minted.failed:
            console_log.write(job.pk, stream_role(rank), number, "[SLURM] Object storage did not answer: this attempt "
                              "has no storage credentials (no script download, no output upload, no checkpoint mirror)")
    actions.start_attempts([job], {job.pk: number}, {job.pk: reason})  # the caller locked the job
    return run


def close_run(run: SlurmRun, state: str, ended_at: datetime | None, exit_code: int | None = None,
              exit_signal: int | None = None) -> None:
    """The run is over in Slurm: its placements stop holding GPUs at Slurm's end time."""
    ended_at = ended_at or timezone.now()
    if run.ended_at is None:
        SlurmRun.objects.filter(pk=run.pk).update(ended_at=ended_at, state=state[:32], exit_code=exit_code, exit_signal=exit_signal)
        run.ended_at, run.state, run.exit_code, run.exit_signal = ended_at, state, exit_code, exit_signal
    placements = Placement.objects.filter(attempt_id=run.attempt_id)
    placements.filter(state__in=HOLDING_STATES).update(state=PlacementState.EXITED)
    placements.update(ended_at=ended_at)
    credentials.request_sweep_on_commit()  # the run's storage keys are revoked


def current_run(job: TrainingJob) -> SlurmRun | None:
    return SlurmRun.objects.select_related("attempt").filter(attempt__job=job, attempt__number=job.current_attempt).first()


# -- tokens --------------------------------------------------------------------------------------
def issue_token(run: SlurmRun, launch_key: str) -> str:
    """The token of the run's launchers, derived from the job's launch key and the run: the batch
    step retries a redemption whose answer did not come (a console slow under load), and a
    retried request must not replace the token an earlier one handed out meanwhile, or the
    launchers holding it would be refused. A newer run gets another token; the old one stops working."""
    message = f"simpleai-slurm-run:{run.slurm_job_id}:{run.restart_count}:{run.pk}".encode()
    token = base64.urlsafe_b64encode(hmac.new(launch_key.encode(), message, hashlib.sha256).digest()).decode().rstrip("=")
    SlurmRun.objects.filter(pk=run.pk).update(token_hash=hash_secret(token))
    return token


def run_for_token(token: str) -> SlurmRun | None:
    if not token:
        return None
    return SlurmRun.objects.select_related("attempt", "slurm_job").filter(token_hash=hash_secret(token)).first()


# -- what the launchers report -----------------------------------------------------------------
@transaction.atomic
def record_step(run: SlurmRun, role: str, state: str, exit_code: int | None = None, signal: int | None = None,
                output_url: str = "", message: str = "") -> str:
    """A launcher's placement report; "stale" when its run is no longer the job's current attempt.

    Preparing/running go through jobs.lifecycle (Creating → Running once every node runs). An exit
    only records the node's outcome: the job's outcome follows Slurm's state (jobs.slurm.sync).
    """
    job_id, number = run.attempt.job_id, run.attempt.number
    if state in (PlacementState.PREPARING, PlacementState.RUNNING):
        return lifecycle.record_placement(PlacementReport(job_id, number, role, state), node_id=None)
    job = TrainingJob.objects.select_for_update().filter(pk=job_id).first()
    if job is None or job.current_attempt != number:
        return "stale"
    Placement.objects.filter(attempt_id=run.attempt_id, role=role, ended_at__isnull=True).update(
        state=PlacementState.EXITED, exit_code=exit_code, exit_signal=signal, output_url=output_url,
        message=message[:1000], ended_at=timezone.now(),
    )
    credentials.request_sweep_on_commit()
    if not Placement.objects.filter(attempt_id=run.attempt_id, ended_at__isnull=True).exists():
        # every node's command has ended: Slurm ends the job next; poll for it now (jobs.slurm.tasks)
        transaction.on_commit(request_pass)
    return "ok"


def failure_reason(run: SlurmRun | None, slurm_text: str) -> str:
    """The classified reason of a failed run: the first node whose command failed, with its evidence
    (exit code, log tail, jobs.recovery.faults), then what Slurm says."""
    exits: list[Placement] = []
    if run is not None:
        exits = list(Placement.objects.filter(attempt_id=run.attempt_id, state=PlacementState.EXITED).exclude(exit_code=0, exit_signal=None))
    # a rank that exited on its own failed first; ranks stopped by a signal were stopped because of it;
    # and one whose own output says a peer failed was not first either, whenever its report came (each
    # launcher reports its exit after its own checks: the order of the reports is not the order of the exits)
    exits.sort(key=lambda p: (p.exit_signal is not None, p.ended_at or timezone.now()))
    judged = [(placement, *_judge(run, placement)) for placement in exits] if run is not None else []
    first = next((item for item in judged if not item[2]), judged[0] if judged else None)
    if first is None:
        return _capitalise(slurm_text)
    placement, decision, _ = first
    return f"{_capitalise(placement.role)} on {placement.node_name}: {decision.reason}; {slurm_text}"


def _judge(run: SlurmRun, placement: Placement) -> tuple[Decision, bool]:
    """The classification of one node's exit, and whether its output blames a peer."""
    tail = LogLine.objects.filter(job_id=run.attempt.job_id, stream=placement.role, attempt=run.attempt.number).order_by("-seq")
    lines = tuple(reversed(list(tail.values_list("text", flat=True)[:LOG_TAIL_LINES])))
    if placement.message and not lines:
        lines = (placement.message,)
    decision = classify(ExitEvidence(exit_code=placement.exit_code, signal=placement.exit_signal,
                                     node_name=placement.node_name, log_tail=lines))
    return decision, any(pattern.search(line) for line in lines for pattern in PEER_FAILURE_PATTERNS)


def say(job: TrainingJob, text: str) -> None:
    """A line in every stream of the current attempt (decisions the user should see in the Logs tab)."""
    for role in Placement.objects.filter(attempt__job=job, attempt__number=job.current_attempt).values_list("role", flat=True):
        console_log.write(job.pk, role, job.current_attempt, text)


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:]
