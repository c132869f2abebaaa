"""Celery tasks of the jobs app: thin wrappers that load plain data and call the actions."""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import transaction

from . import actions, events
from .channel import notify
from .models import Placement, TrainingJob
from .nodes import registry
from .recovery import failover
from .scheduling import scheduler_run
from .storage import credentials
from .storage.iam import StorageUnavailable

log = logging.getLogger(__name__)


_last_run_ended = 0.0  # time.monotonic() when this worker process's last scheduler run ended


class _TooSoon(Exception):
    """The previous run ended less than SCHEDULER_MIN_GAP_MS ago: let go of the lock and wait."""


@shared_task(bind=True, acks_late=True, ignore_result=True)
def schedule_jobs(self: Any) -> dict[str, Any]:
    """Place waiting jobs on free capacity (jobs.scheduling.scheduler_run); idempotent.

    The request flag is cleared only once this run holds the scheduler lock: while it waits
    behind the run in progress, events ask for nothing more (it will see them), so at most one
    run ever waits and the watchdog always finds a worker thread. A queued run also starts at
    least SCHEDULER_MIN_GAP_MS after the previous one ended (waiting without the lock, the flag
    still set), so a burst of completions is one run that sees them all."""
    global _last_run_ended
    queued = not (self.request.called_directly or self.request.is_eager)

    def too_soon() -> float:
        return settings.SCHEDULER_MIN_GAP_MS / 1000 - (time.monotonic() - _last_run_ended) if queued else 0.0

    def locked() -> None:
        if too_soon() > 0:
            raise _TooSoon  # the run it waited behind has just ended
        notify.schedule_request_taken()

    while True:
        if (wait := too_soon()) > 0:
            time.sleep(wait)
        try:
            summary = scheduler_run.run(on_locked=locked)
        except _TooSoon:
            continue
        except Exception:
            _last_run_ended = time.monotonic()
            raise
        _last_run_ended = time.monotonic()
        return summary.counts()


@shared_task(ignore_result=True)
def scheduler_tick() -> None:
    """The periodic run, asked for like any event: while one is queued, a tick adds nothing (a
    tick per interval behind a long run would hold every worker thread on the scheduler lock,
    and the watchdog's tasks would wait behind them)."""
    notify.request_schedule()


@shared_task(acks_late=True, ignore_result=True)
def recheck_interruption(job_id: int, placement_id: int) -> None:
    """A kill without evidence, looked at again a few seconds later (jobs.recovery.failover)."""
    with transaction.atomic():
        job = TrainingJob.objects.select_for_update().filter(pk=job_id).first()
        placement = Placement.objects.select_related("attempt").filter(pk=placement_id).first()
        if job is None or placement is None:
            return
        failover.recheck_later(job, placement)


@shared_task(acks_late=True, ignore_result=True)
def watch_heartbeats() -> list[str]:
    with events.batched():  # a rack lost at once fails over many jobs: their events go out together
        lost = registry.watch_heartbeats()
    if lost:
        log.warning("nodes lost (no heartbeat): %s", ", ".join(lost))
    return lost


@shared_task(acks_late=True, ignore_result=True)
def finish_failover_assessments() -> list[int]:
    """Recheck jobs left assessing a failover past their recheck time (a lost delayed task)."""
    with events.batched():
        return failover.finish_overdue_assessments()


@shared_task(bind=True, acks_late=True, ignore_result=True, autoretry_for=(StorageUnavailable,),
             retry_backoff=2, retry_backoff_max=30, max_retries=3)
def sweep_storage_credentials(self: Any) -> dict[str, Any]:
    """Revoke the storage keys of attempts that hold no placement any more, and delete left-over
    identities (jobs.storage.credentials.sweep): level-triggered, idempotent, safe to run twice
    at once. Asked for after placements end, and run by beat every STORAGE_SWEEP_SECONDS; object
    storage that does not answer is tried again a few times, then left to the next beat."""
    credentials.sweep_request_taken()  # an ending from now on asks for another sweep
    swept = credentials.sweep()
    return {"revoked": len(swept.revoked), "removed": len(swept.removed)}


@shared_task(acks_late=True, ignore_result=True, autoretry_for=(StorageUnavailable,), retry_backoff=1, max_retries=2)
def mint_attempt_keys_ahead(job_id: int) -> bool:
    """A waiting job's next attempt's storage keys, minted before the scheduler places it
    (jobs.storage.credentials.mint_ahead): exits quietly when the job is gone or placed, safe
    twice. Left undone, nothing is lost: the scheduler run mints what it does not find."""
    return credentials.mint_ahead(job_id)


# seconds between tries when object storage does not answer; then the job Failed, with why
COPY_RETRY_DELAYS = (5, 15, 45, 120, 300)


@shared_task(bind=True, acks_late=True, ignore_result=True, max_retries=len(COPY_RETRY_DELAYS))
def copy_start_checkpoint(self: Any, job_id: int) -> str:
    """Copy the checkpoint a new job starts from into its own prefix (jobs.storage.checkpoint_copy),
    then let the scheduler place it; idempotent (a copy made twice is the same objects)."""
    from .storage.checkpoint_copy import CopyFailed, copy_for_job

    try:
        copied = copy_for_job(job_id)
    except CopyFailed as exc:
        if exc.transient and self.request.retries < len(COPY_RETRY_DELAYS):
            raise self.retry(countdown=COPY_RETRY_DELAYS[self.request.retries]) from exc
        actions.fail_start_checkpoint(job_id, f"Could not start from the checkpoint: {exc}")
        return "failed"
    if copied is None:
        return "nothing to do"
    log.info("job %s starts from checkpoint step %s (%d files, %d bytes copied)", job_id, copied.step, copied.files, copied.bytes)
    return "copied" if actions.start_checkpoint_copied(job_id, copied.step, copied.url) else "moved on"
