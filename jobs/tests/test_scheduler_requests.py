"""Scheduler runs are asked for through one flag: a burst of events, or beat ticks behind a long
run, queue one run on the real broker (Redis), not one task each."""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis
from django.conf import settings

from console.celery import app
from jobs import notify
from jobs.tasks import scheduler_tick


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

