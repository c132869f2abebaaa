"""Scheduler runs are asked for through one flag: a burst of events, or beat ticks behind a long
run, queue one run on the real broker (Redis), not one task each."""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis
from django.conf import settings
from django.db import connection, transaction

from console.celery import app
from jobs.channel import notify
from jobs.scheduling.locks import take_scheduler_lock
from jobs.tasks import schedule_jobs, scheduler_tick


@pytest.fixture
def broker():
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    app.control.purge()
    client.delete(notify.SCHEDULE_REQUESTED)
    yield client
    app.control.purge()
    client.delete(notify.SCHEDULE_REQUESTED)


def queued_tasks(broker) -> list[str]:
    return [json.loads(raw)["headers"]["task"] for raw in broker.lrange("celery", 0, -1)]


def test_a_burst_of_requests_and_ticks_queues_one_run(broker):
    for _ in range(20):
        notify.request_schedule()
        scheduler_tick()
    assert queued_tasks(broker) == ["jobs.tasks.schedule_jobs"]


def test_a_request_during_a_run_queues_exactly_one_more(broker):
    notify.request_schedule()
    notify.schedule_request_taken()  # the run starts: what changes from now on needs another run
    for _ in range(5):
        scheduler_tick()
    assert queued_tasks(broker) == ["jobs.tasks.schedule_jobs"] * 2


def test_a_lost_request_stops_blocking_ticks_after_its_expiry(broker):
    broker.set(notify.SCHEDULE_REQUESTED, "1", px=50)  # a request whose task was lost with its worker
    assert queued_tasks(broker) == []
    time.sleep(0.1)
    scheduler_tick()
    assert queued_tasks(broker) == ["jobs.tasks.schedule_jobs"]


def test_commits_while_a_request_is_made_are_covered_by_one_more_that_begins_after_them(monkeypatch):
    """Agent reports commit faster than Redis answers: they coalesce, and none goes unasked."""
    began: list[float] = []
    first = threading.Event()

    def slow_request() -> None:
        began.append(time.monotonic())
        first.set()
        time.sleep(0.3)

    monkeypatch.setattr(notify, "request_schedule", slow_request)
    asker = notify._Asker()
    asker.ask()
    assert first.wait(2)
    for _ in range(50):
        asker.ask()
    last_commit = time.monotonic()
    time.sleep(1)
    assert len(began) == 2  # not 51
    assert began[1] >= last_commit



@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # the run waits in another thread
def test_runs_waiting_behind_a_long_run_do_not_multiply(broker):
    """A run queued while another runs waits for the lock without taking the request: events
    meanwhile queue nothing more (each task that took it while waiting let one more in, until
    every worker thread waited on the lock and the watchdog had none)."""
    holding, release = threading.Event(), threading.Event()

    def long_run() -> None:  # a run in progress: it holds the scheduler lock
        with transaction.atomic():
            take_scheduler_lock()
            holding.set()
            release.wait(10)
        connection.close()

    def queued_run() -> None:  # a worker thread running the queued task
        schedule_jobs()
        connection.close()

    first = threading.Thread(target=long_run)
    first.start()
    assert holding.wait(5)
    notify.request_schedule()  # an event: the task a worker thread takes next
    second = threading.Thread(target=queued_run)
    second.start()
    time.sleep(0.5)  # it waits for the lock
    for _ in range(5):  # more events behind it
        notify.request_schedule()
    try:
        assert queued_tasks(broker) == ["jobs.tasks.schedule_jobs"]
    finally:
        release.set()
        first.join(5)
        second.join(10)
    assert not second.is_alive()
    notify.request_schedule()  # the run took the request when it ran: a new event queues one more
    assert queued_tasks(broker) == ["jobs.tasks.schedule_jobs"] * 2
