"""A scheduler run's live events go out together, after its own commit (transactional)."""

from __future__ import annotations

import pytest

from jobs import actions

from .factories import job_fields
from .test_nodes import make_node


@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # the run's own commit sends the events
def test_a_scheduler_run_sends_all_its_job_events_together(alice, monkeypatch):
    """A fleet's backlog: one run starts a job and rewrites every other waiting reason. Each of
    them reaches its page and the owner's list, in one send (one event loop per event cost a
    run minutes)."""
    from console.lib import live
    from jobs.scheduling import scheduler_run

    make_node("gpu-01")
    jobs = [actions.create_job(alice, job_fields(name=f"big-{i}", gpus_per_node=8), []) for i in range(12)]
    sends: list[list[tuple[str, dict]]] = []
    monkeypatch.setattr(live, "publish_many", lambda items: sends.append(list(items)))
    summary = scheduler_run.run()
    assert summary.placed == 1 and summary.waiting == 11
    job_sends = [items for items in sends if any(group.startswith("job-") for group, _ in items)]
    assert len(job_sends) == 1
    (items,) = job_sends
    assert {group for group, _ in items} == {f"job-{job.pk}" for job in jobs} | {f"user-{alice.pk}"}
    on_pages = [message for group, message in items if group.startswith("job-")]
    reasons = {message["job_id"] for message in on_pages if message["type"] == "job.reason"}
    started = {message["job_id"] for message in on_pages if message["type"] == "job.status"}
    assert len(reasons) == 11 and len(started) == 1 and reasons | started == {job.pk for job in jobs}
