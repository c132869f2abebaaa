"""The console's end of the step launchers' WebSocket (nodeagent.slurm_protocol).

The agent protocol (nodeagent.protocol) with a narrower credential: the token of one run of one
Slurm job. Each message is checked like an agent's (jobs.channel.socket). After `hello` names a
node of the run's allocation, the connection may write only that job, that attempt and that
node's role: anything else is refused, acknowledged and kept for staff.
"""

from __future__ import annotations

import logging

from django.conf import settings

from monitoring import ingest, metrics_ingest
from nodeagent import protocol
from nodeagent.protocol import stream_role

from .. import lifecycle
from ..channel.db import agent_db
from ..channel.socket import ProtocolConsumer, bearer_token
from ..channel.writes import RefusedWrite
from . import runs, steps

log = logging.getLogger(__name__)
RESYNC_EVERY_HEARTBEATS = 5


def _own_samples(job_id: int, batch: dict) -> list[metrics_ingest.Sample]:
    """Samples of this job (GPU samples name it while its command holds the GPU) and of the node."""
    samples = metrics_ingest.parse(batch.get("samples"))
    foreign = {s.job_id for s in samples if s.job_id not in (None, job_id)}
    if foreign:
        raise RefusedWrite(f"this run's launcher may send metrics of job {job_id} only, not of {sorted(foreign)}")
    return samples


def _store_metrics(node: str, samples: list[metrics_ingest.Sample]) -> None:
    metrics_ingest.store_samples(node, samples)
    metrics_ingest.publish(node, samples)


class SlurmStepConsumer(ProtocolConsumer):
    run = None
    role: str | None = None
    node_name = ""

    async def connect(self) -> None:
        await self.accept()  # first, so a refusal can carry a readable message
        self.run = await agent_db(runs.run_for_token)(bearer_token(self.scope))
        self.beats = 0
        if self.run is None:
            await self.refuse("the token is not known to this console, or a newer run of the job replaced it")
            return
        self.accepting, self.sender = True, f"slurm run of job {self.run.attempt.job_id}"

    async def handle(self, message: dict, raw: str) -> None:
        kind = message["type"]
        if kind == "hello":
            await self._hello(message)
        elif self.role is None:
            await self.refuse("the first message must be hello")
        elif kind == "heartbeat":
            self.beats += 1
            if self.beats % RESYNC_EVERY_HEARTBEATS == 0:
                await self._send_desired()
        else:
            await self._store(kind, message)
            await self.send_json(protocol.Ack(type="ack", upto=message["msg_id"]))

    def _check_mine(self, message: dict) -> None:
        job_id, number = self.run.attempt.job_id, self.run.attempt.number
        stream = message.get("stream", message.get("role"))
        if message.get("job_id") != job_id or message.get("attempt") != number or stream != self.role:
            raise RefusedWrite(
                f"this launcher writes job {job_id}, attempt {number}, as {self.role}; not "
                f"{message.get('job_id')}/{message.get('attempt')}/{stream}"
            )

    async def _store(self, kind: str, message: dict) -> None:
        if kind == "logs":
            self._check_mine(message)
            await agent_db(ingest.store_lines)(message["job_id"], message["stream"], message["attempt"], message["lines"])
        elif kind == "attempt":
            self._check_mine(message)
            await agent_db(runs.record_step)(
                self.run, self.role, message["state"], message.get("exit_code"), message.get("signal"),
                message.get("output_url", ""), message.get("message", ""),
            )
        elif kind == "metrics":
            samples = _own_samples(self.run.attempt.job_id, message)
            if samples:
                await agent_db(_store_metrics)(self.node_name, samples)
        elif kind == "checkpoint":
            self._check_mine(message)
            await agent_db(lifecycle.commit_checkpoint)(message["job_id"], message["attempt"], message["step"], message["url"])
        # fault: Slurm watches its nodes' health; a node it marks down fails the run over

    async def _hello(self, hello: dict) -> None:
        name = str((hello.get("node") or {}).get("name", ""))
        if name not in self.run.nodes:
            await self.refuse(f"node {name!r} is not in this run's allocation ({', '.join(self.run.nodes)})")
            return
        self.node_name, self.role = name, stream_role(self.run.nodes.index(name))
        self.sender = f"slurm node {name} (job {self.run.attempt.job_id})"
        await self.send_json(protocol.Welcome(
            type="welcome", node_id=0, heartbeat_interval=float(settings.NODE_HEARTBEAT_SECONDS),
        ))
        await self._send_desired()

    async def _send_desired(self) -> None:
        placements = await agent_db(steps.desired)(self.run.pk, self.role)
        await self.send_json(protocol.Desired(type="desired", placements=placements))
