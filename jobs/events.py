"""Live events about jobs: payload types and the one helper that sends them.

Browsers watching a job join the group `job-<id>`; the list page of a user joins `user-<id>`.
"""

from __future__ import annotations

import logging
from typing import Literal, TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

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


def job_group(job_id: int) -> str:
    return f"job-{job_id}"


def user_group(user_id: int) -> str:
    return f"user-{user_id}"


def send_job_event(job_id: int, owner_id: int, event: JobStatusEvent | JobReasonEvent) -> None:
    """Fan an event out to the job's watchers and its owner's pages; never fails the caller."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(job_group(job_id), dict(event))
        async_to_sync(layer.group_send)(user_group(owner_id), dict(event))
    except Exception:  # Redis down: the page still shows the truth on reload
        log.warning("could not publish %s for job %s", event["type"], job_id, exc_info=True)
