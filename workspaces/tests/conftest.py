"""Fixtures of the workspaces tests (the personas are the root conftest's).

Nodes are registry rows unless a test starts real agents (e2e fixtures).
"""

from __future__ import annotations

import pytest

# every fixture (and the failure-report hook) of the end-to-end tests: real processes
from jobs.tests.e2e.conftest import *  # noqa: F403

from .factories import make_node


@pytest.fixture
def nodes(db):
    """Four connected g2 nodes with 8 healthy GPUs each: gpu-01 … gpu-04."""
    return [make_node(f"gpu-0{i}") for i in range(1, 5)]


@pytest.fixture
def run_scheduler(django_capture_on_commit_callbacks):
    """Run one scheduler pass now (tasks queued on commit are dropped, not sent to Celery)."""
    from jobs.tasks import schedule_jobs

    def run():
        with django_capture_on_commit_callbacks(execute=False):
            return schedule_jobs()

    return run


@pytest.fixture(autouse=True)
def no_celery(monkeypatch):
    """Nothing reaches a broker: requests for a scheduler run become no-ops (tests run passes by hand)."""
    from jobs.channel import notify

    monkeypatch.setattr(notify, "request_schedule", lambda: None)
