"""Nodes' batches stored at the same moment (jobs.channel.inbox.store_batches on several threads):
each job a batch names is locked up front, in one order, so two batches never deadlock."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from django.db import connection

from jobs.channel.inbox import STORED, store_batches
from monitoring import ingest
from monitoring.models import LogLine

from .test_nodes import make_node
from .test_report_batches import lines, placed, report

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def _deadlocks() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


def test_two_batches_naming_the_same_jobs_in_another_order_never_deadlock(alice, monkeypatch):
    """Node 1 sends lines of job B and a report of job A, node 2 the other way round, in batches
    stored at the same moment: a row that references a job locks it, so each job is locked up
    front, in one order (before, the two waited for each other until PostgreSQL killed one)."""
    first, second = make_node("gpu-01"), make_node("gpu-02")
    job_a, job_b = placed(alice, [first, second], "a"), placed(alice, [first, second], "b")
    both_inserted = threading.Barrier(2)
    store_lines = ingest.store_batches

    def store_lines_then_wait(batches):
        refused = store_lines(batches)
        with contextlib.suppress(threading.BrokenBarrierError):
            both_inserted.wait(timeout=2)  # the other batch is waiting for a lock held here
        return refused

    monkeypatch.setattr(ingest, "store_batches", store_lines_then_wait)
    before = _deadlocks()
    outcomes = {}

    def store(node, messages):
        try:
            outcomes[node.name] = store_batches([(node.pk, messages, node.name)])
        finally:
            connection.close()

    threads = [
        threading.Thread(target=store, args=(first, [lines(job_b), report(job_a, "running")])),
        threading.Thread(target=store, args=(second, [lines(job_a, "worker-1"), report(job_b, "running", "worker-1")])),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    time.sleep(0.6)  # pg_stat_database is updated when a backend reports its statistics
    assert outcomes == {"gpu-01": [[STORED, STORED]], "gpu-02": [[STORED, STORED]]}
    assert _deadlocks() == before
    assert LogLine.objects.count() == 4
