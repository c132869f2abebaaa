"""The Training Job statuses as plain data, no Django: the state machine (jobs.states) reads them,
and jobs.choices.JobStatus offers the same values, as model choices, to models, forms and the API.
The values are the seed's words exactly; a member's value is also its label."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    PENDING = "Pending"
    CREATING = "Creating"
    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPED = "Stopped"
    TERMINATING = "Terminating"
    FAILOVER_IN_PROGRESS = "Pending - failoverinprogress"
    INTERNAL_ERROR = "Pending - internalerror"
    MAX_RETRIES_EXCEEDED = "Pending - maxretriesexceeded"
    IMAGE_PULL_BACKOFF = "Pending - imagepullbackoff"
    SPOT_INTERRUPTED = "Pending - spotinterrupted"
