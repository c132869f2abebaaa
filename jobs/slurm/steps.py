"""What the console tells a run's step launchers: the launch-key redemption and each node's placement."""

from __future__ import annotations

import contextlib
import hmac
from typing import Any

from django.db import transaction
from django.utils import timezone

from nodeagent import protocol

from ..choices import JobStatus
from ..models import Placement, TrainingJob
from ..nodes import placement_message
from . import jobcomp, runs, sync
from .adapters import SlurmJobView
from .client import SlurmError
from .hostlist import HostlistError, expand
from .models import SlurmJob, SlurmRun, hash_secret
from .states import RUNNING_STATES, STARTING_STATES


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _request_fields(data: Any) -> tuple[int, int, int, tuple[str, ...]]:
    try:
        nodes = tuple(expand(str(data["nodelist"])))
        numbers = int(data["job_id"]), int(data["slurm_job_id"]), int(data.get("restart_count") or 0)
    except (KeyError, TypeError, ValueError, HostlistError) as exc:
        raise Refused(400, f"malformed request: {exc}") from exc
    if not nodes:
        raise Refused(400, "malformed request: empty nodelist")
    return (*numbers, nodes)


def _view(slurm_job: SlurmJob, restart: int, nodes: tuple[str, ...]) -> SlurmJobView:
    """Slurm's own view of the run when slurmrestd answers; else what the batch step says."""
    try:
        view = slurm_job.cluster.client().job(slurm_job.slurm_job_id)
    except SlurmError:
        view = None
    if view is not None and view.restart_count == restart and view.state in RUNNING_STATES | STARTING_STATES and view.nodes:
        return view
    return SlurmJobView(job_id=slurm_job.slurm_job_id, name="", state="RUNNING", reason="None", restart_count=restart,
                        nodes=nodes, start_time=timezone.now())


def redeem(launch_key: str, data: Any) -> tuple[str, int]:
    """The batch step's launch key → (a token for this run only, its attempt number)."""
    job_id, slurm_id, restart, nodes = _request_fields(data)
    slurm_job = SlurmJob.objects.select_related("cluster").filter(training_job_id=job_id, slurm_job_id=slurm_id).first()
    if slurm_job is None or not hmac.compare_digest(hash_secret(launch_key or ""), slurm_job.launch_key_hash):
        raise Refused(403, "unknown job or wrong launch key")
    view = _view(slurm_job, restart, nodes)
    records = jobcomp.read(slurm_job.cluster.jobcomp_path, [slurm_id]).get(slurm_id, [])
    client = slurm_job.cluster.client()
    # a requeue the poll has not seen yet ends the previous attempt first, then this run starts
    # (a second pass); a Slurm call that fails here (a cancel of a deleted job) is retried by the poll
    for _ in range(2):
        with contextlib.suppress(SlurmError):
            sync.apply(slurm_job.pk, view, records, client)
        if SlurmRun.objects.filter(slurm_job=slurm_job, restart_count=restart).exists():
            break
    with transaction.atomic():
        job = TrainingJob.objects.select_for_update().filter(pk=job_id).first()
        run = SlurmRun.objects.select_related("attempt").filter(slurm_job=slurm_job, restart_count=restart).first()
        if job is None:
            raise Refused(409, "the job was deleted")
        if run is None or run.attempt.number != job.current_attempt or job.status not in (JobStatus.CREATING, JobStatus.RUNNING):
            raise Refused(409, f"this run is not wanted: the job is {job.status} ({job.status_reason})")
        return runs.issue_token(run, launch_key), run.attempt.number


def desired(run_id: int, role: str) -> list[protocol.Placement]:
    """This node's placement while its run is the job's current attempt and the job is Creating or Running."""
    run = SlurmRun.objects.select_related("attempt", "slurm_job__cluster").filter(pk=run_id).first()
    if run is None:
        return []
    job = TrainingJob.objects.select_related("owner").filter(pk=run.attempt.job_id).first()
    if job is None or job.current_attempt != run.attempt.number or job.status not in (JobStatus.CREATING, JobStatus.RUNNING):
        return []
    row = placement_message.rows(Placement.objects.filter(attempt_id=run.attempt_id, role=role)).first()
    if row is None:
        return []
    return [placement_message.build(row, grace=run.slurm_job.cluster.stop_grace_seconds, with_registry=False)]
