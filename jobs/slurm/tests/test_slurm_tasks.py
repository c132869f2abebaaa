"""The Slurm pass as a task: one pass at a time, and a request made during a pass is not lost."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.db import connection, connections

from jobs.slurm import sync, tasks

pytestmark = pytest.mark.django_db(transaction=True)


def _other_session() -> psycopg.Connection:
    s = connection.settings_dict
    return psycopg.connect(dbname=s["NAME"], user=s["USER"], password=s["PASSWORD"] or None, host=s["HOST"] or None,
                           port=s["PORT"] or None, autocommit=True)


def test_a_request_during_a_pass_runs_one_more_pass_after_it_and_further_requests_join_that_one(monkeypatch):
    passes = []
    monkeypatch.setattr(sync, "sync_all", lambda: passes.append("pass"))
    monkeypatch.setattr(sync, "runs_ending", lambda: False)
    with _other_session() as running:  # a pass in progress holds the lock
        running.execute("SELECT pg_advisory_lock(%s)", [tasks.SYNC_LOCK_ID])
        results: list[bool] = []

        def request() -> None:
            try:
                results.append(tasks.sync_slurm())
            finally:
                connections.close_all()

        waiter = threading.Thread(target=request)
        waiter.start()
        with _other_session() as probe:  # wait until the first request waits for the running pass
            while waiter.is_alive() and not probe.execute("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = %s AND granted)",
                                    [tasks.WAITER_LOCK_ID]).fetchone()[0]:
                waiter.join(0.01)
        assert tasks.sync_slurm() is False  # covered by the waiting one
        assert passes == []
        running.execute("SELECT pg_advisory_unlock(%s)", [tasks.SYNC_LOCK_ID])
        waiter.join(30)
    assert results == [True] and passes == ["pass"]
