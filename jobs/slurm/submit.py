"""Submitting waiting jobs to their Slurm cluster (a pass of jobs.slurm.sync): every Pending job of
the cluster's server type that has no Slurm job yet, as its owner's Slurm account and Unix user
where the site maps them; a refusal fails the job, a failed call waits for the next pass.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from .. import actions
from ..choices import JobStatus
from ..models import TrainingJob
from ..models.jobs import AWAITING_CHECKPOINT_COPY
from . import job_request, quotas
from .adapters import SlurmJobView
from .batch_script import build_batch_script, job_id_from_name, submission
from .client import SlurmClient, SlurmError, SlurmRefused, SlurmUnreachable, Submission
from .models import SlurmCluster, SlurmJob, new_secret

log = logging.getLogger(__name__)


def submit_waiting(cluster: SlurmCluster, client: SlurmClient, views: dict[int, SlurmJobView] | None) -> None:
    """Submit every Pending job of the cluster's server type that has no Slurm job yet. Without
    Slurm's listing (`views` None) only those never submitted (no SlurmJob row): one whose
    submission was tried may be in Slurm already, unrecorded, and waits for the listing to adopt it."""
    waiting = TrainingJob.objects.filter(server_type=cluster.server_type, status=JobStatus.PENDING).exclude(
        slurm__slurm_job_id__isnull=False,
    ).exclude(AWAITING_CHECKPOINT_COPY).order_by("created_at", "pk")
    if views is None:
        waiting = waiting.filter(slurm__isnull=True)
    ours = {job_id: view.job_id for view in (views or {}).values() if (job_id := job_id_from_name(view.name))}
    jobs = list(waiting.select_related("server_type", "owner"))
    held = quotas.holds([job for job in jobs if job.pk not in ours])
    for job in jobs:
        if job.pk in held:
            actions.set_waiting_reason(job.pk, held[job.pk][:500])
            continue
        if not submit(cluster, client, job, ours):
            return  # slurmrestd did not answer: the others wait for the next pass


def submit(cluster: SlurmCluster, client: SlurmClient, job: TrainingJob, ours: dict[int, int] | None = None) -> bool:
    """Submit one job; False when slurmrestd could not be reached (the job says so, and waits)."""
    existing = SlurmJob.objects.filter(job=job).first()
    known = (ours or {}).get(job.pk)
    if existing is not None and known:
        # submitted before, but the id was never recorded (the console stopped in between)
        record_submission(existing.pk, job.pk, known, cluster)
        log.warning("Slurm cluster %s: adopted Slurm job %s as the submission of job %s", cluster.name, known, job.pk)
        return True
    if job.gpus_per_node > cluster.gpus_per_node:
        _refused(job.pk, f"Slurm cluster {cluster.name} has {cluster.gpus_per_node} GPUs per node; the job asks for {job.gpus_per_node}")
        return True
    mapping = job_request.account_for(cluster, job.owner)
    key, key_hash = new_secret()
    try:
        spec = job_request.batch_spec(cluster, job, key, mapping)
    except ValueError as exc:
        _refused(job.pk, f"Slurm cluster {cluster.name} cannot take the job: {exc}")
        return True
    run_as = mapping.unix_user if mapping is not None and mapping.unix_user else ""
    with transaction.atomic():
        locked = TrainingJob.objects.select_for_update().filter(pk=job.pk, status=JobStatus.PENDING).first()
        if locked is None:
            return True
        slurm_job, _ = SlurmJob.objects.update_or_create(job=locked, defaults={
            "cluster": cluster, "training_job_id": locked.pk, "launch_key_hash": key_hash,
            "account": spec.resources.get("account", ""), "run_as": run_as,
        })
    try:
        # as the owner's Unix user where the site has them: slurmd runs the job as that user
        submitter = cluster.client(user=run_as) if run_as else client
        submitted = submitter.submit(build_batch_script(spec), submission(spec))
    except SlurmRefused as refused:
        _refused(job.pk, f"Slurm cluster {cluster.name} refused the job: {refused}", slurm_job.pk)
        return True
    except SlurmError as exc:
        actions.set_waiting_reason(job.pk, f"Cannot submit to Slurm cluster {cluster.name} yet: {exc}; retrying"[:500])
        return not isinstance(exc, SlurmUnreachable)
    # a job id means Slurm queued it, whatever it said beside it (a drained node, a hold): its
    # pending reason follows from the next poll
    record_submission(slurm_job.pk, job.pk, submitted, cluster)
    return True


def record_submission(slurm_job_pk: int, job_id: int, submitted: Submission | int, cluster: SlurmCluster) -> None:
    if isinstance(submitted, int):
        submitted = Submission(submitted)
    SlurmJob.objects.filter(pk=slurm_job_pk).update(slurm_job_id=submitted.job_id, submitted_at=timezone.now(), state="PENDING")
    said = f" (Slurm: {'; '.join(submitted.warnings)})" if submitted.warnings else ""
    actions.set_waiting_reason(job_id, f"Submitted to Slurm cluster {cluster.name} as job {submitted.job_id}{said}"[:500])


@transaction.atomic
def _refused(job_id: int, reason: str, slurm_job_pk: int | None = None) -> None:
    job = TrainingJob.objects.select_for_update().filter(pk=job_id, status=JobStatus.PENDING).first()
    if job is not None:
        actions.transition(job.pk, JobStatus.FAILED, reason[:500])
    if slurm_job_pk is not None:
        SlurmJob.objects.filter(pk=slurm_job_pk).update(finished_at=timezone.now())
