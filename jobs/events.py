"""Live events about jobs: payload types, the one helper that sends them, and the helpers
jobs.actions sends them with after its commit.

Browsers watching a job join the group `job-<id>`; the list page of a user joins `user-<id>`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from django.db import transaction
from django.utils import timezone

from console.lib import live

if TYPE_CHECKING:
    from .models import TrainingJob

DELETED = "Deleted"  # the status a `job.status` event carries when the job is gone


class JobStatusEvent(TypedDict):
    type: Literal["job.status"]
    job_id: int
    status: str
    reason: str
    at: str


class JobReasonEvent(TypedDict):
    """The status reason changed without a status change (e.g. what a waiting job waits for)."""

    type: Literal["job.reason"]
    job_id: int
    status: str
    reason: str
    at: str


class JobFieldsEvent(TypedDict):
    """Fields the job's page shows changed (checkpoint, results, failovers, warm start): the new
    values by field name, JSON-ready (times as ISO 8601). Sent to the job's page only."""

    type: Literal["job.fields"]
    job_id: int
    fields: dict[str, str | int | bool | None]
    at: str


JobEvent = JobStatusEvent | JobReasonEvent | JobFieldsEvent
FieldValue = str | int | bool | datetime | None


def job_group(job_id: int) -> str:
    return f"job-{job_id}"


def user_group(user_id: int) -> str:
    return f"user-{user_id}"


_batch = threading.local()


def send_job_event(job_id: int, owner_id: int, event: JobEvent) -> None:
    """Fan an event out to the job's watchers and (status and reason) its owner's pages; never
    fails the caller. Inside `batched()` it is sent with the others when the batch ends."""
    items: list[tuple[str, dict[str, Any]]] = [(job_group(job_id), dict(event))]
    if event["type"] != "job.fields":  # the list shows none of them
        items.append((user_group(owner_id), dict(event)))
    pending = getattr(_batch, "items", None)
    if pending is not None:
        pending.extend(items)
    else:
        live.publish_many(items)


@contextlib.contextmanager
def batched() -> Iterator[None]:
    """Collect this thread's job events and send them together at the end (one event loop and
    one Redis pool). A scheduler run that rewrites thousands of waiting reasons and starts
    hundreds of jobs otherwise paid one event loop per event: minutes of a run in a fleet's
    backlog. Events of a transaction that rolled back never reach it (they are sent on commit)."""
    if getattr(_batch, "items", None) is not None:  # an outer batch sends them
        yield
        return
    _batch.items = []
    try:
        yield
    finally:
        items, _batch.items = _batch.items, None
        if items:
            live.publish_many(items)


def publish_status(job: TrainingJob) -> None:
    """The job's status and reason as they are now, to its watchers after the commit."""
    event = JobStatusEvent(
        type="job.status", job_id=job.pk, status=job.status,
        reason=job.status_reason, at=timezone.now().isoformat(),
    )
    transaction.on_commit(lambda: send_job_event(job.pk, job.owner_id, event))


def publish_fields(job_id: int, owner_id: int, fields: Mapping[str, FieldValue]) -> None:
    """The job page shows these fields: it updates them in place after the commit."""
    values = {name: value.isoformat() if isinstance(value, datetime) else value for name, value in fields.items()}
    event = JobFieldsEvent(type="job.fields", job_id=job_id, fields=values, at=timezone.now().isoformat())
    transaction.on_commit(lambda: send_job_event(job_id, owner_id, event))


def send_on_commit(sent: Sequence[tuple[int, int, JobEvent]]) -> None:
    """Send many jobs' events after the commit, together (one hand-over, not one per event)."""
    def send() -> None:
        with batched():
            for job_id, owner_id, event in sent:
                send_job_event(job_id, owner_id, event)

    if sent:
        transaction.on_commit(send)
