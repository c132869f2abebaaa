"""The Slurm poll as a Celery task: every scheduler tick (beat) and when a job waits for submission."""

from __future__ import annotations

from celery import shared_task
from django.db import connection

from . import sync

# one pass at a time: two would submit the same job twice
SYNC_LOCK_ID = 0x5A1_57A1


@shared_task(acks_late=True, ignore_result=True)
def sync_slurm() -> bool:
    """One pass over every cluster; False when another pass was running (this one is not needed:
    the running one, or the next beat tick, sees everything — a burst of job creations that each
    ask for a pass costs one pass, not one each)."""
    if connection.vendor != "postgresql":
        sync.sync_all()
        return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [SYNC_LOCK_ID])
        if not cursor.fetchone()[0]:
            return False
    try:
        sync.sync_all()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [SYNC_LOCK_ID])
    return True
