"""WebSockets for the owner's browser: one job's live events, and the job list's.

Another user's job, or no login, is answered like a missing page: the socket is accepted and
closed at once with code 4404 (4401 without a session; console.lib.sockets.OwnerSocket), which the page reads as "stop
reconnecting and say why". The list's socket joins only its own user's group, so it hears
only that user's jobs.
"""

from __future__ import annotations

from typing import Any

from console.lib.sockets import CLOSE_NOT_FOUND, OwnerSocket

from .events import DELETED, job_group, user_group
from .models import TrainingJob


class JobSocket(OwnerSocket):
    """A socket of one job (the URL's job_id), open only to its owner (monitoring's Logs tab too)."""

    def owns(self, user: Any) -> bool:
        self.job_id = int(self.scope["url_route"]["kwargs"]["job_id"])
        return TrainingJob.objects.filter(pk=self.job_id, owner=user).exists()


class _JobEventsConsumer(OwnerSocket):
    """Joins one group (set by start) and passes the jobs' live events on to the browser."""

    async def join(self, group: str) -> None:
        self.group = group
        await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def job_status(self, event: dict[str, Any]) -> None:
        await self.send_json(event)

    async def job_reason(self, event: dict[str, Any]) -> None:
        await self.send_json(event)


class JobConsumer(JobSocket, _JobEventsConsumer):
    """/ws/jobs/<id>/: one job's status, reason and metric samples, for its owner's page."""

    async def start(self, user: Any) -> None:
        await self.join(job_group(self.job_id))

    async def job_status(self, event: dict[str, Any]) -> None:
        await self.send_json(event)
        if event.get("status") == DELETED:
            await self.close(code=CLOSE_NOT_FOUND)  # the page says so and stops reconnecting

    async def job_fields(self, event: dict[str, Any]) -> None:
        """Checkpoint, results, failovers or warm start changed (jobs.actions)."""
        await self.send_json(event)

    async def job_metrics(self, event: dict[str, Any]) -> None:
        """New metric samples of this job (monitoring.metrics_ingest.publish) for its charts."""
        await self.send_json(event)


class JobListConsumer(_JobEventsConsumer):
    """/ws/jobs/: every status change (creation and deletion too) of the user's own jobs."""

    async def start(self, user: Any) -> None:
        await self.join(user_group(user.pk))
