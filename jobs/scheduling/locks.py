"""The scheduler's lock: one capacity decision at a time, across every worker and process."""

from __future__ import annotations

from django.db import connection

# any 64-bit number unique to this lock; two scheduler runs at once would double-book GPUs
SCHEDULER_LOCK_ID = 0x5A1_7A1A


def take_scheduler_lock() -> None:
    """Serialise capacity decisions with a transaction-scoped PostgreSQL advisory lock.

    Runs wait rather than skip: a skipped run could miss the change that triggered it.
    Callers: the scheduler run, and workspace reservations (a node must not be reserved in the
    moment the scheduler gives it to a shared-pool job).
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SCHEDULER_LOCK_ID])
