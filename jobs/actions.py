"""Every change to a Training Job's status, tags or existence goes through these functions.

Each one is atomic, locks the row it changes, writes a history row, and publishes its live
event after the commit (zulip's `do_*` actions).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from django.db import transaction
from django.utils import timezone

from . import bulk
from .choices import ACTIVE_STATUSES, JobStatus
from .events import DELETED, JobReasonEvent, JobStatusEvent, send_job_event
from .models import JobAttempt, JobStatusChange, JobTag, ServerType, TrainingJob
from .notify import schedule_on_commit, sync_nodes_on_commit
from .states import check_transition

# the statuses in which a job's current attempt should run on its nodes
RUNNABLE = frozenset({JobStatus.CREATING, JobStatus.RUNNING})
# waiting jobs whose reason the scheduler keeps up to date (a failover keeps its decision)
REASON_REWRITABLE = (JobStatus.PENDING, JobStatus.SPOT_INTERRUPTED)


def _publish_status(job: TrainingJob) -> None:
    event = JobStatusEvent(
        type="job.status", job_id=job.pk, status=job.status,
        reason=job.status_reason, at=timezone.now().isoformat(),
    )
    transaction.on_commit(lambda: send_job_event(job.pk, job.owner_id, event))


@transaction.atomic
def create_job(owner, fields: Mapping, tags: Iterable[Mapping[str, str]], registry_password: str = "") -> TrainingJob:
    """Create a job in `Pending` from validated fields; the first history row says so."""
    server_type = fields["server_type"]
    if not isinstance(server_type, ServerType):
        server_type = ServerType.objects.get(name=server_type)
    job = TrainingJob(owner=owner, **{**fields, "server_type": server_type})
    job.status = JobStatus.PENDING
    job.status_reason = "Waiting to be scheduled"
    job.set_registry_password(registry_password)
    job.save()
    JobTag.objects.bulk_create([JobTag(job=job, key=t["key"], value=t.get("value", "")) for t in tags])
    JobStatusChange.objects.create(job=job, old_status="", new_status=job.status, reason="Created")
    _publish_status(job)
    schedule_on_commit()
    return job


@transaction.atomic
def transition(job_id: int, new_status: str, reason: str = "") -> TrainingJob:
    """Move a job to `new_status`; raises IllegalTransition when the table forbids it."""
    job = TrainingJob.objects.select_for_update().get(pk=job_id)
    check_transition(job.status, new_status)
    old = job.status
    job.status, job.status_reason = new_status, reason[:500]
    job.save(update_fields=["status", "status_reason", "updated_at"])
    JobStatusChange.objects.create(job=job, old_status=old, new_status=new_status, reason=reason[:500])
    if old in RUNNABLE and new_status not in RUNNABLE:
        # from now on its placements hold their GPUs only for the stop grace (jobs.capacity)
        JobAttempt.objects.filter(job=job, number=job.current_attempt, stop_requested_at__isnull=True).update(
            stop_requested_at=timezone.now(),
        )
    _publish_status(job)
    return job


def start_attempts(jobs: Sequence[TrainingJob], reasons: Mapping[int, str]) -> None:
    """Move waiting jobs (locked by the caller, `current_attempt` already set to their new
    attempt) to Creating in one UPDATE, with one history row each and their live events."""
    if not jobs:
        return
    for job in jobs:
        check_transition(job.status, JobStatus.CREATING)
    bulk.update_each(
        TrainingJob, [job.pk for job in jobs],
        {"status_reason": ("text", [reasons[job.pk][:500] for job in jobs]),
         "current_attempt": ("integer", [job.current_attempt for job in jobs])},
        same={"status": JobStatus.CREATING, "updated_at": timezone.now()},
    )
    JobStatusChange.objects.bulk_create([
        JobStatusChange(job=job, old_status=job.status, new_status=JobStatus.CREATING, reason=reasons[job.pk][:500])
        for job in jobs
    ])
    for job in jobs:
        job.status, job.status_reason = JobStatus.CREATING, reasons[job.pk][:500]
        _publish_status(job)


def note_warm_starts(notes: Mapping[int, tuple[bool, str]]) -> None:
    """How jobs first started (warm or not, and why), for their pages: set once per job."""
    if not notes:
        return
    bulk.update_each(
        TrainingJob, list(notes),
        {"started_warm": ("boolean", [warm for warm, _ in notes.values()]),
         "warm_note": ("text", [note[:300] for _, note in notes.values()])},
        where="t.started_warm IS NULL",
    )


def reason_changed(job_id: int) -> None:
    """A job's status reason was rewritten without a status change (no history row): after the
    commit, its page and its owner's list show the new reason."""
    def send() -> None:
        job = TrainingJob.objects.filter(pk=job_id).values("owner_id", "status", "status_reason").first()
        if job is not None:
            send_job_event(job_id, job["owner_id"], JobReasonEvent(
                type="job.reason", job_id=job_id, status=job["status"], reason=job["status_reason"],
                at=timezone.now().isoformat(),
            ))

    transaction.on_commit(send)


def set_waiting_reasons(jobs: Mapping[TrainingJob, str]) -> int:
    """Rewrite waiting jobs' reasons (no status change, no history row) in one UPDATE, and push
    each new reason to the job's page and its owner's list after the commit. A job whose status
    moved on in the meantime keeps its own reason. Returns how many changed."""
    reasons = {job.pk: text[:500] for job, text in jobs.items() if job.status_reason != text[:500]}
    if not reasons:
        return 0
    changed = bulk.update_each(
        TrainingJob, list(reasons), {"status_reason": ("text", list(reasons.values()))},
        same={"updated_at": timezone.now()}, where="t.status = ANY(%s)", where_params=[list(REASON_REWRITABLE)],
    )
    at = timezone.now().isoformat()
    events = [
        (job.pk, job.owner_id, JobReasonEvent(type="job.reason", job_id=job.pk, status=job.status, reason=reasons[job.pk], at=at))
        for job in jobs if job.pk in reasons and job.status in REASON_REWRITABLE
    ]

    def send() -> None:
        for job_id, owner_id, event in events:
            send_job_event(job_id, owner_id, event)

    transaction.on_commit(send)
    return changed


def set_waiting_reason(job_id: int, reason: str) -> int:
    """One waiting job's reason (see set_waiting_reasons)."""
    job = TrainingJob.objects.filter(pk=job_id).only("pk", "owner_id", "status", "status_reason").first()
    return set_waiting_reasons({job: reason}) if job is not None else 0


@transaction.atomic
def replace_tags(job: TrainingJob, tags: Iterable[Mapping[str, str]]) -> None:
    """Set the job's tags to exactly `tags` (already validated)."""
    TrainingJob.objects.select_for_update().filter(pk=job.pk).first()
    job.tags.all().delete()
    JobTag.objects.bulk_create([JobTag(job=job, key=t["key"], value=t.get("value", "")) for t in tags])


def delete_job(job_id: int, reason: str = "Deleted by the user") -> str:
    """Delete a job. One that holds nodes is first set to `Terminating`; returns what happened."""
    with transaction.atomic():
        job = TrainingJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None:
            return "gone"
        if job.status == JobStatus.TERMINATING:
            return "terminating"
        if job.status in ACTIVE_STATUSES:
            transition(job.pk, JobStatus.TERMINATING, reason)
            # the agents stop the processes; the last exit report removes the job
            sync_nodes_on_commit(job.attempts.filter(number=job.current_attempt).values_list("placements__node_id", flat=True))
            return "terminating"
        remove_job(job, reason)
    return "deleted"


def remove_job(job: TrainingJob, reason: str = "Deleted by the user") -> None:
    """Delete the row (logs and history go with it) and tell watchers after the commit."""
    job_id, owner_id = job.pk, job.owner_id
    job.delete()
    event = JobStatusEvent(type="job.status", job_id=job_id, status=DELETED, reason=reason, at=timezone.now().isoformat())
    transaction.on_commit(lambda: send_job_event(job_id, owner_id, event))
