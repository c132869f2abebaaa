"""The console's end of the step launchers' WebSocket (nodeagent.slurm_protocol).

The agent protocol (nodeagent.protocol) with a narrower credential: the token of one run of one
Slurm job. After `hello` names a node of the run's allocation, the connection may write only
that job, that attempt and that node's role: anything else is acknowledged and dropped.
"""

from __future__ import annotations

import logging

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from monitoring import ingest, metrics_ingest
from nodeagent import protocol
from nodeagent.protocol import stream_role

from .. import lifecycle, nodes
from ..agent_consumer import _bearer_token  # the same Authorization: Bearer header as the agents
from . import runs, steps

log = logging.getLogger(__name__)
RESYNC_EVERY_HEARTBEATS = 5


def _own_samples(job_id: int, batch: dict) -> list[metrics_ingest.Sample]:
    """Samples of this job (GPU samples name it while its command holds the GPU) and of the node."""
    return [s for s in metrics_ingest.parse(batch.get("samples")) if s.job_id in (None, job_id)]


def _store_metrics(node: str, samples: list[metrics_ingest.Sample]) -> None:
    metrics_ingest.store_samples(node, samples)
    metrics_ingest.publish(node, samples)


class SlurmStepConsumer(AsyncJsonWebsocketConsumer):
    run = None
    role: str | None = None
    node_name = ""

    async def connect(self) -> None:
        await self.accept()  # first, so a refusal can carry a readable message
        self.run = await database_sync_to_async(runs.run_for_token)(_bearer_token(self.scope))
        self.beats = 0
        if self.run is None:
            await self._refuse("the token is not known to this console, or a newer run of the job replaced it")

    async def _refuse(self, message: str) -> None:
        self.run = None
        await self.send_json(protocol.Error(type="error", message=message))
        await self.close(code=protocol.CLOSE_BAD_TOKEN)

    async def receive_json(self, content: dict, **kwargs) -> None:
        if self.run is None:
            return
        kind = content.get("type")
        if kind == "hello":
            await self._hello(content)
        elif self.role is None:
            await self._refuse("the first message must be hello")
        elif kind == "heartbeat":
            self.beats += 1
            if self.beats % RESYNC_EVERY_HEARTBEATS == 0:
                await self._send_desired()
        elif kind in ("logs", "attempt", "metrics", "checkpoint", "fault"):
            await self._store(kind, content)
            await self.send_json(protocol.Ack(type="ack", upto=content["msg_id"]))
        else:
            log.warning("step launcher on %s sent an unknown message type %r", self.node_name, kind)

    def _mine(self, message: dict) -> bool:
        job_id, number = self.run.attempt.job_id, self.run.attempt.number
        stream = message.get("stream", message.get("role"))
        if message.get("job_id") == job_id and message.get("attempt") == number and stream == self.role:
            return True
        log.warning("step launcher on %s (job %s attempt %s %s) sent a %s for %s/%s/%s: dropped", self.node_name,
                    job_id, number, self.role, message.get("type"), message.get("job_id"), message.get("attempt"), stream)
        return False

    async def _store(self, kind: str, message: dict) -> None:
        if kind == "logs" and self._mine(message):
            await database_sync_to_async(ingest.store_batch, thread_sensitive=False)(message)
        elif kind == "attempt" and self._mine(message):
            await database_sync_to_async(runs.record_step)(
                self.run, self.role, message["state"], message.get("exit_code"), message.get("signal"),
                message.get("output_url", ""), message.get("message", ""),
            )
        elif kind == "metrics":
            samples = _own_samples(self.run.attempt.job_id, message)
            if samples:
                await database_sync_to_async(_store_metrics, thread_sensitive=False)(self.node_name, samples)
        elif kind == "checkpoint" and self._mine(message):
            await database_sync_to_async(lifecycle.record_checkpoint)(
                message["job_id"], message["attempt"], int(message["step"]), message.get("url", ""),
            )
        # fault: Slurm watches its nodes' health; a node it marks down fails the run over

    async def _hello(self, hello: dict) -> None:
        name = str((hello.get("node") or {}).get("name", ""))
        if name not in self.run.nodes:
            await self._refuse(f"node {name!r} is not in this run's allocation ({', '.join(self.run.nodes)})")
            return
        self.node_name, self.role = name, stream_role(self.run.nodes.index(name))
        await self.send_json(protocol.Welcome(
            type="welcome", node_id=0, heartbeat_interval=protocol.HEARTBEAT_INTERVAL,
            object_storage=await database_sync_to_async(nodes.object_storage_settings)(),
        ))
        await self._send_desired()

    async def _send_desired(self) -> None:
        placements = await database_sync_to_async(steps.desired)(self.run.pk, self.role)
        await self.send_json(protocol.Desired(type="desired", placements=placements))
