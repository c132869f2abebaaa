"""Celery tasks of the jobs app: thin wrappers that load plain data and call the actions."""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import transaction

from . import failover, nodes, notify, scheduler_run
from .models import Placement, TrainingJob

log = logging.getLogger(__name__)


@shared_task(acks_late=True, ignore_result=True)
def schedule_jobs() -> dict:
    """Place waiting jobs on free capacity (jobs.scheduler_run); idempotent."""
    notify.schedule_request_taken()
    return scheduler_run.run().counts()


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
    lost = nodes.watch_heartbeats()
    if lost:
        log.warning("nodes lost (no heartbeat): %s", ", ".join(lost))
    return lost


@shared_task(acks_late=True, ignore_result=True)
def finish_failover_assessments() -> list[int]:
    """Recheck jobs left assessing a failover past their recheck time (a lost delayed task)."""
    return failover.finish_overdue_assessments()
