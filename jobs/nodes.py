"""Node registry actions: agent authentication, registration, liveness, cordon, desired state."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from nodeagent import protocol
from workspaces.agent_hints import add_warm_pool_hints

from . import actions, failover
from .choices import JobStatus
from .environments import add_environments
from .models import HardwareEvent, Node, NodeGPU, NodeToken, Placement, PlacementState, ServerType, TrainingJob
from .models.attempts import HOLDING_STATES
from .models.nodes import hash_token
from .notify import node_group, schedule_on_commit
from .objectstore import ensure_results_bucket

log = logging.getLogger(__name__)


class AgentRefused(Exception):
    """The agent may not connect; the message is sent to it verbatim."""


def authenticate(token: str) -> NodeToken:
    if not token:
        raise AgentRefused("no token was sent (Authorization: Bearer <token>)")
    record = NodeToken.objects.filter(token_hash=hash_token(token)).first()
    if record is None:
        raise AgentRefused("the token is not known to this console")
    if not record.is_active:
        raise AgentRefused(f"the token of node {record.name!r} was revoked")
    return record


@transaction.atomic
def register(token: NodeToken, info: protocol.NodeInfo) -> Node:
    """Create or update the node from its hello; it is connected and alive again."""
    if info["name"] != token.name:
        raise AgentRefused(f"this token registers node {token.name!r}, not {info['name']!r}")
    server_type = ServerType.objects.filter(name=info["server_type"]).first()
    if server_type is None:
        names = ", ".join(ServerType.objects.values_list("name", flat=True))
        raise AgentRefused(f"unknown server type {info['server_type']!r} (known: {names})")
    now = timezone.now()
    node, _ = Node.objects.select_for_update().update_or_create(
        name=info["name"],
        defaults={
            "server_type": server_type, "address": info["address"], "cpus": info["cpus"],
            "memory_gb": info["memory_gb"], "runtime": info["runtime"], "agent_version": info["agent_version"],
            "connected": True, "lost": False, "last_heartbeat_at": now,
        },
    )
    seen = set()
    for gpu in info["gpus"]:
        seen.add(gpu["index"])
        NodeGPU.objects.update_or_create(
            node=node, index=gpu["index"],
            defaults={"uuid": gpu["uuid"], "model": gpu["model"], "memory_gb": gpu["memory_gb"]},
        )
    NodeGPU.objects.filter(node=node).exclude(index__in=seen).delete()
    NodeToken.objects.filter(pk=token.pk).update(last_used_at=now)
    schedule_on_commit()  # new capacity may fit a waiting job
    return node


def heartbeat(node_id: int) -> None:
    Node.objects.filter(pk=node_id).update(last_heartbeat_at=timezone.now(), connected=True, lost=False)


def disconnected(node_id: int) -> None:
    Node.objects.filter(pk=node_id).update(connected=False)


def desired_placements(node_id: int) -> list[protocol.Placement]:
    """What should run on this node now: current attempts of jobs that are Creating or Running."""
    placements = (
        Placement.objects.filter(
            node_id=node_id, state__in=HOLDING_STATES,
            attempt__job__status__in=[JobStatus.CREATING, JobStatus.RUNNING],
        )
        .select_related("attempt__job")
        .order_by("attempt__job_id", "node_rank")
    )
    result = []
    for p in placements:
        job: TrainingJob = p.attempt.job
        if p.attempt.number != job.current_attempt:
            continue
        result.append(protocol.Placement(
            job_id=job.pk, job_name=job.name, attempt=p.attempt.number, role=p.role,
            node_rank=p.node_rank, nnodes=job.node_count, nproc_per_node=job.gpus_per_node,
            master_addr=p.attempt.master_addr, master_port=p.attempt.master_port,
            gpu_indices=list(p.gpu_indices), command=job.command, script_url=job.script_url,
            image=job.image_url,
            registry={"username": job.registry_username, "password": job.registry_password()}
            if job.registry_username else None,
            shm_size_gb=job.shm_size_gb, mount_path=job.volume_mount_path,
            output_prefix=f"s3://{settings.S3_RESULTS_BUCKET}/jobs/{job.pk}/attempt-{p.attempt.number}",
            resume_step=p.attempt.resume_step,
            stop_grace_seconds=settings.JOB_STOP_GRACE_SECONDS,
            env=checkpoint_environment(job),
        ))
    # workspaces: keep / reuse prepared files; jobs.environments: the job's training environment
    return add_environments(add_warm_pool_hints(result))


def checkpoint_environment(job: TrainingJob) -> dict[str, str]:
    """Where the concurrent checkpointing library mirrors a job's checkpoints, so a failover or
    a spot resume on another node finds them; empty without object storage."""
    if not settings.S3_ENDPOINT_URL:
        return {}
    return {
        "CHECKPOINT_S3_URL": f"s3://{settings.S3_RESULTS_BUCKET}/jobs/{job.pk}/checkpoints",
        "S3_ENDPOINT_URL": settings.S3_ENDPOINT_URL,
        "S3_ACCESS_KEY": settings.S3_ACCESS_KEY,
        "S3_SECRET_KEY": settings.S3_SECRET_KEY,
    }


def fence_after_seconds() -> float:
    """The agent's own deadline: well before the console's, so a cut-off node stops first."""
    return round(settings.NODE_LOST_AFTER_SECONDS * 0.6, 1)


def object_storage_settings() -> protocol.ObjectStorage:
    ensure_results_bucket()
    return protocol.ObjectStorage(
        endpoint_url=settings.S3_ENDPOINT_URL, access_key=settings.S3_ACCESS_KEY,
        secret_key=settings.S3_SECRET_KEY, results_bucket=settings.S3_RESULTS_BUCKET,
    )


@transaction.atomic
def set_cordon(node_id: int, cordoned: bool, reason: str = "") -> None:
    Node.objects.filter(pk=node_id).update(cordoned=cordoned, cordon_reason=reason if cordoned else "")
    if not cordoned:
        schedule_on_commit()


def watch_heartbeats() -> list[str]:
    """Declare nodes Lost after the grace period; their placements end. Returns the names."""
    cutoff = timezone.now() - timedelta(seconds=settings.NODE_LOST_AFTER_SECONDS)
    stale = Node.objects.filter(lost=False).filter(Q(last_heartbeat_at__lt=cutoff) | Q(last_heartbeat_at__isnull=True))
    names = []
    for node in stale:
        with transaction.atomic():
            if not Node.objects.filter(pk=node.pk, lost=False).update(lost=True, connected=False):
                continue  # another watchdog run won
            names.append(node.name)
            for placement in Placement.objects.filter(node=node, state__in=HOLDING_STATES).select_related("attempt"):
                _placement_lost(placement, node)
    return names


def _placement_lost(placement: Placement, node: Node) -> None:
    job = TrainingJob.objects.select_for_update().filter(pk=placement.attempt.job_id).first()
    Placement.objects.filter(pk=placement.pk).update(
        state=PlacementState.LOST, ended_at=timezone.now(), message=f"node {node.name} lost",
    )
    if job is None or job.current_attempt != placement.attempt.number:
        return
    others = Placement.objects.filter(attempt=placement.attempt).exclude(pk=placement.pk)
    if job.status == JobStatus.TERMINATING:
        if not others.filter(state__in=HOLDING_STATES).exists():
            actions.remove_job(job)
        return
    schedule_on_commit()  # its GPUs no longer count as held
    if job.status in (JobStatus.CREATING, JobStatus.RUNNING):
        placement.refresh_from_db()
        failover.interrupted(job, placement, failover.evidence_for(placement, node_lost=True))


def record_fault(node_id: int, event: dict) -> HardwareEvent:
    """Store hardware evidence from an agent; the failover decision reads it."""
    occurred = datetime.fromtimestamp(float(event.get("ts") or timezone.now().timestamp()), tz=UTC)
    row = HardwareEvent.objects.create(
        node_id=node_id, gpu_index=event.get("gpu_index"), kind=str(event.get("kind", ""))[:32],
        xid=event.get("xid"), detail=str(event.get("detail", ""))[:500], occurred_at=occurred,
    )
    if row.kind == "gpu_lost" and row.gpu_index is not None:
        NodeGPU.objects.filter(node_id=node_id, index=row.gpu_index).update(healthy=False)
    log.warning("hardware fault on node %s: %s", node_id, row)
    return row


def inject_fault(node_id: int, kind: str, gpu_index: int | None, xid: int | None = None, detail: str = "") -> None:
    """Ask a node's agent to make one of its simulated GPUs fail (tests, staff, the API)."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    if kind not in protocol.FAULT_KINDS:
        raise ValueError(f"unknown fault kind {kind!r} (known: {', '.join(protocol.FAULT_KINDS)})")
    if kind == "xid" and xid is None:
        raise ValueError("an XID fault needs its XID number")
    message = protocol.InjectFault(type="inject_fault", gpu_index=gpu_index, kind=kind, xid=xid, detail=detail)
    async_to_sync(get_channel_layer().group_send)(node_group(node_id), {"type": "node.inject", "message": message})


@transaction.atomic
def reclaim_from_spot(node_id: int, reason: str) -> int:
    """Interrupt the spot jobs running on a node and cordon it so none lands there again."""
    Node.objects.filter(pk=node_id).update(cordoned=True, cordon_reason=reason[:500])
    job_ids = set(Placement.objects.filter(
        node_id=node_id, state__in=HOLDING_STATES, attempt__job__learning_type="spot",
        attempt__job__status__in=[JobStatus.CREATING, JobStatus.RUNNING],
    ).values_list("attempt__job_id", flat=True))
    for job in TrainingJob.objects.select_for_update().filter(pk__in=job_ids):
        failover.pause_spot(job, reason)
    return len(job_ids)
