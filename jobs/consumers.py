"""WebSockets for the owner's browser: one job's live events, and the job list's.

Another user's job, or no login, is answered like a missing page: the socket is accepted and
closed at once with code 4404 (4401 without a session; console.sockets), which the page reads as "stop
reconnecting and say why". The list's socket joins only its own user's group, so it hears
only that user's jobs.
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from console.sockets import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED, refuse

from .events import DELETED, job_group, user_group
from .models import TrainingJob


@database_sync_to_async
def _owns_job(user, job_id: int) -> bool:
    return TrainingJob.objects.filter(pk=job_id, owner=user).exists()


class _JobEventsConsumer(AsyncJsonWebsocketConsumer):
    """Joins one group (set by connect) and passes the jobs' live events on to the browser."""

    async def join(self, group: str) -> None:
        self.group = group
        await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def job_status(self, event: dict) -> None:
        await self.send_json(event)

    async def job_reason(self, event: dict) -> None:
        await self.send_json(event)


class JobConsumer(_JobEventsConsumer):
    """/ws/jobs/<id>/: one job's status, reason and metric samples, for its owner's page."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        self.job_id = int(self.scope["url_route"]["kwargs"]["job_id"])
        if user is None or not user.is_authenticated:
            await refuse(self, CLOSE_UNAUTHENTICATED)
            return
        if not await _owns_job(user, self.job_id):
            await refuse(self, CLOSE_NOT_FOUND)
            return
        await self.join(job_group(self.job_id))

    async def job_status(self, event: dict) -> None:
        await self.send_json(event)
        if event.get("status") == DELETED:
            await self.close(code=CLOSE_NOT_FOUND)  # the page says so and stops reconnecting

    async def job_fields(self, event: dict) -> None:
        """Checkpoint, results, failovers or warm start changed (jobs.actions)."""
        await self.send_json(event)

    async def job_metrics(self, event: dict) -> None:
        """New metric samples of this job (monitoring.metrics_ingest.publish) for its charts."""
        await self.send_json(event)


class JobListConsumer(_JobEventsConsumer):
    """/ws/jobs/: every status change (creation and deletion too) of the user's own jobs."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await refuse(self, CLOSE_UNAUTHENTICATED)
            return
        await self.join(user_group(user.pk))
