"""Every write to a Training Job's status, status reason, attempt, checkpoint, results, failover
count and warm-start note, to its tags and its existence, and to a node's cordon, goes through
these functions (zulip's `do_*` actions); jobs/tests/test_action_layer.py fails on any other
module that assigns those fields.

Each one is atomic and locks the row it changes (or its caller did, where it says so). What it
records, and what it pushes to browsers after the commit:
- a status change, or a decision about the job (a failover counted): a history row
  (`JobStatusChange`, old and new status, reason, time) and a `job.status` event;
- a reason that says what a waiting job waits for (rewritten by every scheduler run): the new
  reason alone, and a `job.reason` event;
- a job's other fields (checkpoint, results, failovers, warm start): a `job.fields` event with
  the new values, for the job's page;
- a node's cordon: the node's flag and reason, a log line, and a scheduler run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from .channel.notify import schedule_on_commit, sync_nodes_on_commit
from .channel.placement_reports import Transition
from .choices import ACTIVE_STATUSES, TERMINAL_STATUSES, JobStatus
from .events import (
    DELETED,
    FieldValue,
    JobEvent,
    JobFieldsEvent,
    JobReasonEvent,
    JobStatusEvent,
    publish_fields,
    publish_status,
    send_job_event,
    send_on_commit,
)
from .models import JobAttempt, JobStatusChange, JobTag, Node, NodeGPU, Placement, ServerType, TrainingJob
from .models.attempts import HOLDING_STATES
from .scheduling import policy
from .sql import bulk
from .states import check_transition
from .storage import checkpoint_copy, credentials

log = logging.getLogger(__name__)

# the statuses in which a job's current attempt should run on its nodes
RUNNABLE = frozenset({JobStatus.CREATING, JobStatus.RUNNING})
# waiting jobs whose reason the scheduler keeps up to date (a failover keeps its decision)
REASON_REWRITABLE = (JobStatus.PENDING, JobStatus.SPOT_INTERRUPTED)
# a job that waits or runs can be stopped; one that ended or is being deleted cannot
STOPPABLE = frozenset(JobStatus) - TERMINAL_STATUSES - {JobStatus.TERMINATING}


@transaction.atomic
def create_job(owner: Any, fields: Mapping[str, Any], tags: Iterable[Mapping[str, str]], registry_password: str = "") -> TrainingJob:
    """Create a job in `Pending` from validated fields; the first history row says so."""
    server_type = fields["server_type"]
    if not isinstance(server_type, ServerType):
        server_type = ServerType.objects.get(name=server_type)
    fields = dict(fields)
    source_id = fields.pop("from_checkpoint", None)
    if isinstance(source_id, TrainingJob):
        source_id = source_id.pk
    job = TrainingJob(owner=owner, **{**fields, "server_type": server_type})
    job.status = JobStatus.PENDING
    job.status_reason = "Waiting to be scheduled"
    job.set_registry_password(registry_password)
    job.save()
    created = "Created"
    if source_id:
        created = _start_from_checkpoint(job, source_id)
    JobTag.objects.bulk_create([JobTag(job=job, key=t["key"], value=t.get("value", "")) for t in tags])
    JobStatusChange.objects.create(job=job, old_status="", new_status=job.status, reason=created)
    publish_status(job)
    credentials.mint_ahead_on_commit(job.pk)  # its first attempt's storage keys, off the scheduler's path
    if not policy.claim_new(server_type.pk):  # a Slurm cluster's job goes straight to its pass
        schedule_on_commit()
    return job


def _start_from_checkpoint(job: TrainingJob, source_id: int) -> str:
    """Note which checkpoint the job starts from; the copy into its own prefix is made after the
    commit (jobs.tasks.copy_start_checkpoint: a large checkpoint takes minutes, no request
    waits for it) and until then no scheduler places the job (AWAITING_CHECKPOINT_COPY). The
    source is the owner's (checked again here)."""
    source = TrainingJob.objects.filter(pk=source_id, owner_id=job.owner_id).only("pk", "name", "checkpoint_step").first()
    if source is None or source.checkpoint_step is None:
        raise checkpoint_copy.CopyFailed(f"Job {source_id} has no checkpoint to start from.")
    job.from_checkpoint_id, job.from_checkpoint_step = source.pk, source.checkpoint_step
    job.status_reason = f"Copying checkpoint step {source.checkpoint_step} of job {source.pk} ({source.name})"
    job.save(update_fields=["from_checkpoint", "from_checkpoint_step", "status_reason"])
    transaction.on_commit(lambda: credentials._send("jobs.tasks.copy_start_checkpoint", job.pk))
    return f"Created to start from checkpoint step {source.checkpoint_step} of job {source.pk} ({source.name})"


@transaction.atomic
def start_checkpoint_copied(job_id: int, step: int, url: str) -> bool:
    """The copy of the checkpoint a job starts from is made: it is the job's own newest
    checkpoint now (its first attempt resumes from it) and the scheduler may place the job.
    False when the job is gone, no longer waits, or has it already."""
    job = TrainingJob.objects.select_for_update().filter(pk=job_id, status=JobStatus.PENDING).first()
    if job is None or job.checkpoint_step is not None or job.from_checkpoint_step != step:
        return False
    fields = {"checkpoint_step": step, "checkpoint_url": url[:1024], "checkpoint_at": timezone.now(),
              "status_reason": f"Checkpoint step {step} copied; waiting to be scheduled"}
    for name, value in fields.items():
        setattr(job, name, value)
    job.save(update_fields=[*fields, "updated_at"])
    publish_fields(job.pk, job.owner_id, {k: v for k, v in fields.items() if k != "status_reason"})
    schedule_on_commit()
    return True


def fail_start_checkpoint(job_id: int, reason: str) -> bool:
    """The checkpoint a waiting job starts from could not be copied: the job Failed, with why."""
    with transaction.atomic():
        job = TrainingJob.objects.select_for_update().filter(pk=job_id, status=JobStatus.PENDING).first()
        if job is None or job.checkpoint_step is not None:
            return False
        check_transition(job.status, JobStatus.FAILED)
        _record(job, JobStatus.FAILED, reason)
    return True


def _record(job: TrainingJob, new_status: str, reason: str, fields: Mapping[str, FieldValue] | None = None) -> None:
    """Write a status (or the same one: a decision), its reason and `fields` in one UPDATE, with a
    history row; the job's page and its owner's list hear of it after the commit. The caller
    locked the row and checked the transition."""
    fields = dict(fields or {})
    old = job.status
    job.status, job.status_reason = new_status, reason[:500]
    for name, value in fields.items():
        setattr(job, name, value)
    job.save(update_fields=["status", "status_reason", *fields, "updated_at"])
    JobStatusChange.objects.create(job=job, old_status=old, new_status=new_status, reason=reason[:500])
    if old in RUNNABLE and new_status not in RUNNABLE:
        # from now on its placements hold their GPUs only for the stop grace (jobs.scheduling.capacity)
        JobAttempt.objects.filter(job=job, number=job.current_attempt, stop_requested_at__isnull=True).update(
            stop_requested_at=timezone.now(),
        )
    publish_status(job)
    if fields:
        publish_fields(job.pk, job.owner_id, fields)


def _locked(job_id: int) -> TrainingJob:
    return TrainingJob.objects.select_for_update().get(pk=job_id)


@transaction.atomic
def _lock_and_move(job_id: int, new_status: str, reason: str, fields: Mapping[str, FieldValue] | None = None) -> TrainingJob:
    job = _locked(job_id)
    check_transition(job.status, new_status)
    _record(job, new_status, reason, fields)
    return job


def transition(job_id: int, new_status: str, reason: str = "") -> TrainingJob:
    """Move a job to `new_status`; raises IllegalTransition when the table forbids it."""
    return _lock_and_move(job_id, new_status, reason)


def complete_job(job_id: int, reason: str, result_url: str) -> TrainingJob:
    """Every node's command succeeded: Completed, with where its OUTPUT_DIR was uploaded (a
    Slurm run's; agents' reports complete jobs in bulk: apply_transitions)."""
    return _lock_and_move(job_id, JobStatus.COMPLETED, reason, {"result_url": result_url[:1024]})


@transaction.atomic
def count_failover(job_id: int, reason: str, new_status: str | None = None) -> TrainingJob:
    """The job fails over (once more): its failover count goes up, with the decision as its reason
    and a history row; `new_status` when the decision also moves it (else it keeps its status).
    The caller words `reason` with the new count (the locked job's `failover_count + 1`)."""
    job = _locked(job_id)
    status = new_status or job.status
    if new_status is not None:
        check_transition(job.status, new_status)
    _record(job, status, reason, {"failover_count": job.failover_count + 1})
    return job


@transaction.atomic
def fall_back_to_on_demand(job_id: int, reason: str, price: Decimal, now: datetime) -> TrainingJob | None:
    """An interrupted spot job's fallback budget ran out: from now on it is placed, kept and
    billed as on-demand (`price` per GPU-hour). It keeps its status (it still waits to resume);
    the decision is a history row. None when it resumed or fell back meanwhile."""
    job = _locked(job_id)
    if job.status != JobStatus.SPOT_INTERRUPTED or job.on_demand_since is not None:
        return None
    job.on_demand_price_per_gpu_hour = price
    job.save(update_fields=["on_demand_price_per_gpu_hour"])
    _record(job, job.status, reason, {"on_demand_since": now})
    return job


@transaction.atomic
def stop_job(job_id: int, reason: str) -> bool:
    """Stop a job that waits or runs: `Stopped`, and its agents stop its processes (SIGTERM, the
    stop grace, SIGKILL). False when it is gone, has ended, or is being deleted."""
    job = TrainingJob.objects.select_for_update().filter(pk=job_id).first()
    if job is None or job.status not in STOPPABLE:
        return False
    check_transition(job.status, JobStatus.STOPPED)
    _record(job, JobStatus.STOPPED, reason)
    sync_nodes_on_commit(Placement.objects.filter(attempt__job=job, state__in=HOLDING_STATES).values_list("node_id", flat=True))
    return True


@transaction.atomic
def set_checkpoint(job_id: int, step: int, url: str) -> bool:
    """The job's newest durable checkpoint, when `step` is newer than the one it has (a resumed
    attempt starts from it). The caller authorized the sender and fenced its attempt."""
    job = _locked(job_id)
    if job.checkpoint_step is not None and step <= job.checkpoint_step:
        return False
    fields = {"checkpoint_step": step, "checkpoint_url": url[:1024], "checkpoint_at": timezone.now()}
    for name, value in fields.items():
        setattr(job, name, value)
    job.save(update_fields=[*fields, "updated_at"])
    publish_fields(job.pk, job.owner_id, fields)
    return True


def start_attempts(jobs: Sequence[TrainingJob], attempts: Mapping[int, int], reasons: Mapping[int, str]) -> None:
    """Move waiting jobs (locked by the caller) to Creating on their new attempt
    (`attempts`: job id → its number) in one UPDATE, with one history row each and their live
    events; the scheduler's bulk path (jobs.sql.bulk), so a run that places hundreds stays linear."""
    if not jobs:
        return
    for job in jobs:
        check_transition(job.status, JobStatus.CREATING)
    bulk.update_each(
        TrainingJob, [job.pk for job in jobs],
        {"status_reason": ("text", [reasons[job.pk][:500] for job in jobs]),
         "current_attempt": ("integer", [attempts[job.pk] for job in jobs])},
        same={"status": JobStatus.CREATING, "updated_at": timezone.now()},
    )
    _history([(job.pk, job.status, JobStatus.CREATING, reasons[job.pk][:500]) for job in jobs])
    for job in jobs:
        job.status, job.status_reason = JobStatus.CREATING, reasons[job.pk][:500]
        job.current_attempt = attempts[job.pk]
        publish_status(job)


def apply_transitions(moves: Mapping[TrainingJob, Sequence[Transition]]) -> None:
    """Move jobs (locked by the caller) through their `moves`, in order, in one UPDATE for all,
    with a history row for each step and its live events: the bulk path of agents' reports
    (jobs.lifecycle.record_placements), where a batch starts and completes hundreds of jobs."""
    if not moves:
        return
    now = timezone.now()
    history: list[tuple[int, str, str, str]] = []  # (job, old, new, reason)
    stopping: list[int] = []
    sent: list[tuple[int, int, JobEvent]] = []
    at = now.isoformat()
    for job, steps in moves.items():
        for step in steps:
            check_transition(job.status, step.status)
            reason = step.reason[:500]
            history.append((job.pk, job.status, step.status, reason))
            if job.status in RUNNABLE and step.status not in RUNNABLE:
                stopping.append(job.pk)  # its placements hold their GPUs only for the stop grace from now
            job.status, job.status_reason = step.status, reason
            sent.append((job.pk, job.owner_id, JobStatusEvent(type="job.status", job_id=job.pk, status=job.status, reason=reason, at=at)))
            if step.result_url is not None:
                job.result_url = step.result_url[:1024]
                sent.append((job.pk, job.owner_id, JobFieldsEvent(
                    type="job.fields", job_id=job.pk, fields={"result_url": job.result_url}, at=at)))
    jobs = list(moves)
    bulk.update_each(
        TrainingJob, [job.pk for job in jobs],
        {"status": ("text", [job.status for job in jobs]), "status_reason": ("text", [job.status_reason for job in jobs]),
         "result_url": ("text", [job.result_url for job in jobs])},
        same={"updated_at": now},
    )
    _history(history)
    if stopping:
        JobAttempt.objects.filter(job_id__any=stopping, number=F("job__current_attempt"), stop_requested_at__isnull=True).update(
            stop_requested_at=now,
        )
    send_on_commit(sent)


def _history(rows: Sequence[tuple[int, str, str, str]]) -> None:
    """History rows (job, old status, new status, reason) of a bulk path, in one INSERT."""
    bulk.insert_each(JobStatusChange, {
        "job_id": ("bigint", [row[0] for row in rows]), "old_status": ("text", [row[1] for row in rows]),
        "new_status": ("text", [row[2] for row in rows]), "reason": ("text", [row[3] for row in rows]),
    }, same={"created_at": timezone.now()})


def note_warm_starts(notes: Mapping[int, tuple[bool, str]]) -> None:
    """How jobs first started (warm or not, and why), for their pages: set once per job, in one
    UPDATE (the scheduler's bulk path)."""
    if not notes:
        return
    changed = bulk.update_each_returning(
        TrainingJob, list(notes),
        {"started_warm": ("boolean", [warm for warm, _ in notes.values()]),
         "warm_note": ("text", [note[:300] for _, note in notes.values()])},
        returning=["owner_id"], where="t.started_warm IS NULL",
    )
    for job_id, owner_id in changed:
        warm, note = notes[job_id]
        publish_fields(job_id, owner_id, {"started_warm": warm, "warm_note": note[:300]})


def set_waiting_reasons(jobs: Mapping[TrainingJob, str], statuses: Iterable[str] = REASON_REWRITABLE) -> int:
    """Rewrite waiting jobs' reasons (no status change, no history row) in one UPDATE (the
    scheduler's bulk path), and push each new reason to the job's page and its owner's list
    after the commit. A job whose status moved on in the meantime keeps its own reason.
    Returns how many changed."""
    reasons = {job.pk: text[:500] for job, text in jobs.items() if job.status_reason != text[:500]}
    if not reasons:
        return 0
    changed = bulk.update_each_returning(
        TrainingJob, list(reasons), {"status_reason": ("text", list(reasons.values()))},
        returning=["owner_id", "status"], same={"updated_at": timezone.now()},
        where="t.status = ANY(%s)", where_params=[list(statuses)],
    )
    at = timezone.now().isoformat()
    events = [
        (job_id, owner_id, JobReasonEvent(type="job.reason", job_id=job_id, status=status, reason=reasons[job_id], at=at))
        for job_id, owner_id, status in changed
    ]

    send_on_commit(events)  # thousands of reasons: one send, not one event loop each
    return len(changed)


def set_waiting_reason(job_id: int, reason: str, statuses: Iterable[str] = REASON_REWRITABLE) -> int:
    """One waiting job's reason (see set_waiting_reasons)."""
    job = TrainingJob.objects.filter(pk=job_id).only("pk", "owner_id", "status", "status_reason").first()
    return set_waiting_reasons({job: reason}, statuses) if job is not None else 0


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
    credentials.request_sweep_on_commit()  # its attempts' identities are left over now
    event = JobStatusEvent(type="job.status", job_id=job_id, status=DELETED, reason=reason, at=timezone.now().isoformat())
    transaction.on_commit(lambda: send_job_event(job_id, owner_id, event))


@transaction.atomic
def set_cordon(node_id: int, cordoned: bool, reason: str = "", keep_reason: bool = False) -> bool:
    """Cordon a node (no new placements), or uncordon it: staff say it is repaired, so GPUs
    marked faulty by a hardware verdict count as healthy again. `keep_reason`: a node cordoned
    already keeps its first reason (a hardware verdict does not overwrite staff's). Returns
    whether the node changed."""
    nodes = Node.objects.filter(pk=node_id)
    if keep_reason:
        nodes = nodes.filter(cordoned=False)
    changed = bool(nodes.update(cordoned=cordoned, cordon_reason=reason[:500] if cordoned else ""))
    if changed:
        log.info("node %s %s%s", node_id, "cordoned" if cordoned else "uncordoned", f": {reason}" if cordoned else "")
    if not cordoned:
        NodeGPU.objects.filter(node_id=node_id, healthy=False).update(healthy=True)
        schedule_on_commit()  # its GPUs are capacity again
    return changed
