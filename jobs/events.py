"""Live events about jobs: payload types and the one helper that sends them.

Browsers watching a job join the group `job-<id>`; the list page of a user joins `user-<id>`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, Literal, TypedDict

from console import live

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
