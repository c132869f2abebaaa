"""The Slurm poll as a Celery task: every scheduler tick (beat), and on demand — when a job waits
for submission, and while a run's launchers have all exited but Slurm has not said it ended."""

from __future__ import annotations

from celery import shared_task
from django.db import connection

from . import sync

# one pass at a time: two would submit the same job twice
SYNC_LOCK_ID = 0x5A1_57A1
# at most one request waits for the running pass: the pass it then runs sees everything asked for
WAITER_LOCK_ID = 0x5A1_57A2
ENDING_POLL_SECONDS = 0.25  # between passes while Slurm finishes a run whose launchers all exited


@shared_task(acks_late=True, ignore_result=True)
def sync_slurm() -> bool:
    """One pass over every cluster; False when it was not needed.

    A request made while a pass runs may come after that pass looked (a job created just then):
    the first such request waits for the pass to end and runs one more; any further request while
    it waits is covered by it and returns False. A burst of job creations costs two passes, not
    one each, and none waits for the next beat tick."""
    if connection.vendor != "postgresql":
        sync.sync_all()
        return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [SYNC_LOCK_ID])
        if not cursor.fetchone()[0]:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [WAITER_LOCK_ID])
            if not cursor.fetchone()[0]:
                return False
            try:
                cursor.execute("SELECT pg_advisory_lock(%s)", [SYNC_LOCK_ID])
            finally:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [WAITER_LOCK_ID])
    try:
        sync.sync_all()
        ending = sync.runs_ending()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [SYNC_LOCK_ID])
    if ending and not sync_slurm.app.conf.task_always_eager:  # eager (tests): the next call looks again
        # the job ends in Slurm a moment after its launchers exit: look again soon, not a tick later
        sync_slurm.apply_async(countdown=ENDING_POLL_SECONDS)
    return True
