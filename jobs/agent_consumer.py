"""The console's end of a node agent's WebSocket (protocol in nodeagent.protocol).

Thin: jobs.agent_socket checks each message and keeps a bad one from jamming the node; this
calls jobs.nodes.registry / jobs.lifecycle / monitoring.ingest. Messages are handled one at a time per
connection, in order, so `ack` can be cumulative. One connection per node: a hello opens a new
session of the node and the older connection (if any) is closed with 4409.
"""

from __future__ import annotations

import logging
import time

from redis.exceptions import RedisError

from monitoring import ingest, metrics_ingest
from nodeagent import protocol

from . import lifecycle
from .agent_db import OUTAGE_ERRORS, agent_db
from .agent_socket import ProtocolConsumer, bearer_token
from .heartbeats import BOOK
from .nodes import registry
from .notify import node_group

log = logging.getLogger(__name__)
# heartbeats in a row whose `running` differs from the desired state sent before it is sent again
# (a placement being stopped within its grace differs for a few beats: that is expected)
RESYNC_AFTER_DISAGREEMENTS = 3
REJOIN_EVERY_HEARTBEATS = 5


class AgentConsumer(ProtocolConsumer):
    session = 0
    token = None
    sent: frozenset[str] = frozenset()  # placement keys of the desired state sent last
    desired_in_flight = False  # a send of the desired state has begun (the heartbeat book skips it)
    disagreements = 0
    in_group = False
    clock_offset = 0.0  # console time − agent time, measured at hello

    async def connect(self) -> None:
        # accept first so a refusal can carry a readable message before the close
        await self.accept()
        self.beats = 0
        try:
            self.token = await agent_db(registry.authenticate)(bearer_token(self.scope))
        except registry.AgentRefused as refused:
            await self.refuse(str(refused))
            return
        except OUTAGE_ERRORS:
            await self.degraded("the console cannot reach its database")
            return
        self.accepting, self.sender = True, self.token.name

    async def disconnect(self, code: int) -> None:
        if self.node_id is None:
            return
        BOOK.forget(self.node_id, self.session)
        try:  # bookkeeping first: a failure of Redis below must not leave the node "connected"
            await agent_db(registry.disconnected)(self.node_id, self.session)
        except Exception:
            log.warning("could not mark node %s disconnected", self.node_id, exc_info=True)
        if self.in_group:
            try:
                await self.channel_layer.group_discard(node_group(self.node_id), self.channel_name)
            except RedisError:
                log.warning("could not leave node %s's group (Redis)", self.node_id)

    async def handle(self, message: dict) -> None:
        kind = message["type"]
        if kind == "hello":
            await self._hello(message)
            return
        if self.node_id is None:
            await self.refuse("the first message must be hello")
            return
        if kind == "heartbeat":
            await self._heartbeat(message)
            return
        if kind == "logs":
            await agent_db(ingest.store_batch)(message, self.node_id)
        elif kind == "attempt":
            await self._attempt(message)
        elif kind == "metrics":
            await agent_db(metrics_ingest.store_metrics)(self.node_id, message)
        elif kind == "fault":
            await agent_db(registry.record_fault)(self.node_id, message)
        elif kind == "checkpoint":
            await agent_db(lifecycle.record_checkpoint)(
                message["job_id"], message["attempt"], message["step"], message["url"], self.node_id, message["role"],
            )
        await self.send_json(protocol.Ack(type="ack", upto=message["msg_id"]))

    async def _hello(self, hello: protocol.Hello) -> None:
        try:
            node = await agent_db(registry.register)(self.token, hello["node"])
        except registry.AgentRefused as refused:
            await self.refuse(str(refused))
            return
        self.node_id, self.session = node.pk, node.session
        gone = await agent_db(registry.forget_unknown_placements)(node.pk, hello.get("running") or [], hello.get("ended") or [])
        if gone:
            log.warning("node %s came back without %s: treated as lost", node.name, ", ".join(gone))
        if hello.get("sent_at") is not None:
            self.clock_offset = time.time() - float(hello["sent_at"])
        BOOK.ensure_running()
        BOOK.watch(node.pk, node.session, self)
        await self._join_group(announce=True)
        await self.send_json(protocol.Welcome(
            type="welcome", node_id=node.pk, heartbeat_interval=protocol.HEARTBEAT_INTERVAL,
            object_storage=await agent_db(registry.object_storage_settings)(),
            fence_after_seconds=registry.fence_after_seconds(),
        ))
        await self.send_desired()

    async def _join_group(self, announce: bool = False) -> None:
        """Join the node's group (pushed desired-state changes); first tell an older connection
        of the node to close. Without Redis the node still works: its desired state is sent again
        when its heartbeats disagree with it, and it joins when Redis is back."""
        try:
            if announce:
                await self.channel_layer.group_send(
                    node_group(self.node_id), {"type": "node.superseded", "session": self.session},
                )
            await self.channel_layer.group_add(node_group(self.node_id), self.channel_name)
            self.in_group = True
        except RedisError:
            log.warning("node %s registered without Redis; it will join its group later", self.node_id)

    async def _heartbeat(self, beat: protocol.Heartbeat) -> None:
        sent = beat.get("sent_at")
        BOOK.beat(self.node_id, self.session, float(sent) + self.clock_offset if sent is not None else time.time())
        self.beats += 1
        if not self.in_group or self.beats % REJOIN_EVERY_HEARTBEATS == 0:
            # group membership lost with a restarted Redis comes back (group_add is idempotent)
            await self._join_group()
        # the desired state is pushed when it changes; it is sent again only when the agent's
        # report keeps disagreeing with it (a push lost in a disconnect or a Redis outage)
        running = {protocol.placement_key(r["job_id"], r["attempt"], r["role"]) for r in beat.get("running") or []}
        self.disagreements = self.disagreements + 1 if running != self.sent else 0
        if self.disagreements >= RESYNC_AFTER_DISAGREEMENTS:
            await self.send_desired()

    async def _attempt(self, message: protocol.AttemptUpdate) -> None:
        report = lifecycle.PlacementReport(
            job_id=message["job_id"], attempt=message["attempt"], role=message["role"], state=message["state"],
            exit_code=message.get("exit_code"), signal=message.get("signal"),
            output_url=message.get("output_url", ""), message=message.get("message", ""),
            image_error=bool(message.get("image_error")), failure=message.get("failure", ""),
        )
        outcome = await agent_db(lifecycle.record_placement)(report, self.node_id)
        if outcome == "stale":
            log.info("ignored %s of superseded attempt %s/%s", message["state"], message["job_id"], message["attempt"])

    async def send_desired(self) -> None:
        self.desired_in_flight = True
        try:
            placements = await agent_db(registry.desired_placements)(self.node_id)
            self.sent = frozenset(protocol.placement_key(p["job_id"], p["attempt"], p["role"]) for p in placements)
            self.disagreements = 0
            await self.send_json(protocol.Desired(type="desired", placements=placements))
        finally:
            self.desired_in_flight = False

    async def superseded(self) -> None:
        await self.send_json(protocol.Error(
            type="error", message="another connection of this node replaced this one (is a second agent running with its token?)",
        ))
        await self.close(code=protocol.CLOSE_SUPERSEDED)

    async def node_sync(self, event: dict) -> None:
        await self.send_desired()

    async def node_superseded(self, event: dict) -> None:
        if event.get("session", 0) > self.session:
            await self.superseded()

    async def node_inject(self, event: dict) -> None:
        await self.send_json(event["message"])
