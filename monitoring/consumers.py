"""The Logs tab's WebSocket: the recent backlog on connect, then new lines as they arrive."""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from jobs.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from jobs.models import TrainingJob

from . import queries
from .events import logs_group


@database_sync_to_async
def _backlog_if_owner(user, job_id: int) -> tuple[list[dict], list[str]] | None:
    if not TrainingJob.objects.filter(pk=job_id, owner=user).exists():
        return None
    return queries.backlog(job_id), queries.streams(job_id)


class JobLogsConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        job_id = int(self.scope["url_route"]["kwargs"]["job_id"])
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        # join before reading the backlog so no line falls between the two (the page dedupes)
        self.group = logs_group(job_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        found = await _backlog_if_owner(user, job_id)
        if found is None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.accept()
        lines, streams = found
        await self.send_json({"type": "log.backlog", "streams": streams, "lines": lines})

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def log_lines(self, event: dict) -> None:
        await self.send_json(event)
