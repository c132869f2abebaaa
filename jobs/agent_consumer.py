"""The console's end of a node agent's WebSocket (protocol in nodeagent.protocol).

Thin: it decodes messages and calls jobs.nodes / jobs.lifecycle / monitoring.ingest.
Messages are handled one at a time per connection, in order, so `ack` can be cumulative.
"""

from __future__ import annotations

import logging

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from monitoring import ingest, metrics_ingest
from nodeagent import protocol

from . import lifecycle, nodes
from .notify import node_group

log = logging.getLogger(__name__)
RESYNC_EVERY_HEARTBEATS = 5


def _bearer_token(scope) -> str:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


class AgentConsumer(AsyncJsonWebsocketConsumer):
    node_id: int | None = None
    token = None

    async def connect(self) -> None:
        # accept first so a refusal can carry a readable message before the close
        await self.accept()
        try:
            self.token = await database_sync_to_async(nodes.authenticate)(_bearer_token(self.scope))
        except nodes.AgentRefused as refused:
            await self._refuse(str(refused))
        self.beats = 0

    async def _refuse(self, message: str) -> None:
        await self.send_json(protocol.Error(type="error", message=message))
        await self.close(code=protocol.CLOSE_BAD_TOKEN)

    async def disconnect(self, code: int) -> None:
        if self.node_id is not None:
            await self.channel_layer.group_discard(node_group(self.node_id), self.channel_name)
            await database_sync_to_async(nodes.disconnected)(self.node_id)

    async def receive_json(self, content: dict, **kwargs) -> None:
        if self.token is None:
            return
        kind = content.get("type")
        if kind == "hello":
            await self._hello(content)
        elif self.node_id is None:
            await self._refuse("the first message must be hello")
        elif kind == "heartbeat":
            await self._heartbeat()
        elif kind == "logs":
            # off the shared DB thread: batches from many agents are stored in parallel
            await database_sync_to_async(ingest.store_batch, thread_sensitive=False)(content)
            await self.send_json(protocol.Ack(type="ack", upto=content["msg_id"]))
        elif kind == "attempt":
            await self._attempt(content)
        elif kind == "metrics":
            # like logs: off the shared DB thread, stored once, then acknowledged
            await database_sync_to_async(metrics_ingest.store_metrics, thread_sensitive=False)(self.node_id, content)
            await self.send_json(protocol.Ack(type="ack", upto=content["msg_id"]))
        elif kind == "fault":
            await database_sync_to_async(nodes.record_fault)(self.node_id, content)
            await self.send_json(protocol.Ack(type="ack", upto=content["msg_id"]))
        elif kind == "checkpoint":
            await database_sync_to_async(lifecycle.record_checkpoint)(
                content["job_id"], content["attempt"], int(content["step"]), content.get("url", ""),
            )
            await self.send_json(protocol.Ack(type="ack", upto=content["msg_id"]))
        else:
            log.warning("node %s sent an unknown message type %r", self.node_id, kind)

    async def _hello(self, hello: protocol.Hello) -> None:
        try:
            node = await database_sync_to_async(nodes.register)(self.token, hello["node"])
        except nodes.AgentRefused as refused:
            await self._refuse(str(refused))
            return
        except (KeyError, TypeError) as exc:
            await self._refuse(f"malformed hello: missing {exc}")
            return
        self.node_id = node.pk
        await self.channel_layer.group_add(node_group(node.pk), self.channel_name)
        await self.send_json(protocol.Welcome(
            type="welcome", node_id=node.pk, heartbeat_interval=protocol.HEARTBEAT_INTERVAL,
            object_storage=await database_sync_to_async(nodes.object_storage_settings)(),
            fence_after_seconds=nodes.fence_after_seconds(),
        ))
        await self._send_desired()

    async def _heartbeat(self) -> None:
        await database_sync_to_async(nodes.heartbeat)(self.node_id)
        self.beats += 1
        if self.beats % RESYNC_EVERY_HEARTBEATS == 0:
            # level-triggered: a desired-state message lost in a disconnect heals itself
            await self._send_desired()

    async def _attempt(self, message: protocol.AttemptUpdate) -> None:
        report = lifecycle.PlacementReport(
            job_id=message["job_id"], attempt=message["attempt"], role=message["role"], state=message["state"],
            exit_code=message.get("exit_code"), signal=message.get("signal"),
            output_url=message.get("output_url", ""), message=message.get("message", ""),
            image_error=bool(message.get("image_error")), failure=str(message.get("failure") or ""),
        )
        outcome = await database_sync_to_async(lifecycle.record_placement)(report, self.node_id)
        if outcome == "stale":
            log.info("ignored %s of superseded attempt %s/%s", message["state"], message["job_id"], message["attempt"])
        await self.send_json(protocol.Ack(type="ack", upto=message["msg_id"]))

    async def _send_desired(self) -> None:
        placements = await database_sync_to_async(nodes.desired_placements)(self.node_id)
        await self.send_json(protocol.Desired(type="desired", placements=placements))

    async def node_sync(self, event: dict) -> None:
        await self._send_desired()

    async def node_inject(self, event: dict) -> None:
        await self.send_json(event["message"])
