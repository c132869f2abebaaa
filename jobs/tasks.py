"""Celery tasks of the jobs app: thin wrappers that load plain data and call the actions."""

from __future__ import annotations

import logging
import time

from celery import shared_task
from django.conf import settings
from django.db import transaction

from . import events, failover, notify, scheduler_run
from .models import Placement, TrainingJob
from .nodes import registry

log = logging.getLogger(__name__)


_last_run_ended = 0.0  # time.monotonic() when this worker process's last scheduler run ended


class _TooSoon(Exception):
    """The previous run ended less than SCHEDULER_MIN_GAP_MS ago: let go of the lock and wait."""


@shared_task(bind=True, acks_late=True, ignore_result=True)
def schedule_jobs(self) -> dict:
    """Place waiting jobs on free capacity (jobs.scheduler_run); idempotent.

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
    """A kill without evidence, looked at again a few seconds later (jobs.failover)."""
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
