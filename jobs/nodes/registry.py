"""Node registry actions: agent authentication, registration, liveness, cordon, desired state."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from console import crypto, live
from nodeagent import protocol
from nodeagent.protocol_checks import MAX_INT, MAX_SMALLINT

from .. import actions, bulk, failover, policy
from ..choices import JobStatus
from ..environments import add_environments
from ..models import (
    ConsoleListening,
    HardwareEvent,
    Node,
    NodeGPU,
    NodeToken,
    Placement,
    PlacementState,
    ServerType,
    TrainingJob,
)
from ..models.attempts import HOLDING_STATES
from ..notify import node_group, schedule_on_commit
from ..objectstore import checkpoint_prefix, ensure_results_bucket, output_prefix
from . import liveness
from .models import hash_token

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
    """Create or update the node from its hello; it is connected and alive again, under a new
    session: a connection of an older session can no longer act for it (jobs.agent_consumer)."""
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
            "connected": True, "lost": False, "last_heartbeat_at": now, "last_sent_at": now,
        },
    )
    Node.objects.filter(pk=node.pk).update(session=F("session") + 1)
    node.refresh_from_db(fields=["session"])
    # one statement for every GPU, whatever their number
    NodeGPU.objects.bulk_create(
        [NodeGPU(node=node, index=g["index"], uuid=g["uuid"], model=g["model"], memory_gb=g["memory_gb"]) for g in info["gpus"]],
        update_conflicts=True, unique_fields=["node", "index"], update_fields=["uuid", "model", "memory_gb"],
    )
    NodeGPU.objects.filter(node=node).exclude(index__in=[g["index"] for g in info["gpus"]]).delete()
    NodeToken.objects.filter(pk=token.pk).update(last_used_at=now)
    schedule_on_commit()  # new capacity may fit a waiting job
    return node


# The console listens when its heartbeat flushers write (every FLUSH_SECONDS, jobs.heartbeats);
# a pause longer than this means it did not (down, or its database or Redis was).
LISTEN_GAP = timedelta(seconds=10)


@dataclass(frozen=True)
class Beat:
    node_id: int
    session: int
    sent_at: datetime  # when the agent sent it, on the console's clock


@dataclass(frozen=True)
class Flushed:
    """What a flush of heartbeats found, node by node."""

    replaced: frozenset[int] = frozenset()  # a newer connection of the node took over: close this one
    declared_lost: frozenset[int] = frozenset()  # the node's row says disconnected (declared Lost): connect again
    busy: frozenset[int] = frozenset()  # another transaction holds the node's row: try at the next flush


def record_heartbeats(beats: list[Beat], now: datetime | None = None) -> Flushed:
    """Store processed heartbeats in one statement, then that the console is listening.

    One transaction, listening last: the watchdog must never read "the console listens" while
    the beats it processed are not written. A node row another transaction holds (the watchdog
    declaring it, a hello) is skipped rather than waited for: one locked row must not hold up
    the whole fleet's beats (its beat is written at the next flush).
    """
    now = now or timezone.now()
    found: dict[int, tuple[int, bool, bool]] = {}
    with transaction.atomic(), connection.cursor() as cursor:
        if beats:
            cursor.execute(_HEARTBEATS_SQL, [
                bulk.rows_param([[b.node_id for b in beats], [b.session for b in beats], [b.sent_at for b in beats]]), now,
            ])
            found = {node_id: (session, connected, written) for node_id, session, connected, written in cursor.fetchall()}
        written = [b for b in beats if b.node_id in found and found[b.node_id][2]]
        lag = max([(now - b.sent_at).total_seconds() for b in written], default=0.0)
        cursor.execute(_LISTENING_SQL, [now, now, max(0.0, lag), now, now - LISTEN_GAP, now - LISTEN_GAP, now - LISTEN_GAP])
    return Flushed(
        replaced=frozenset(b.node_id for b in beats if b.node_id in found and not found[b.node_id][2]),
        declared_lost=frozenset(b.node_id for b in beats if b.node_id in found and found[b.node_id][2]
                                and not found[b.node_id][1]),
        busy=frozenset(b.node_id for b in beats if b.node_id not in found),
    )


# GREATEST skips NULL: the first beat after an upgrade sets last_sent_at. `connected` is the
# connection's (hello sets it, the disconnect and the watchdog clear it): a beat written late
# must not revive it. A beat of an older session writes nothing (a newer connection took over).
_HEARTBEATS_SQL = f"""
    WITH b AS {bulk.rows_from({"node_id": "bigint", "session": "bigint", "sent_at": "timestamptz"})},
    free AS (
        SELECT n.id, n.session, n.connected FROM {Node._meta.db_table} AS n
        WHERE n.id IN (SELECT node_id FROM b) ORDER BY n.id FOR NO KEY UPDATE SKIP LOCKED
    ),
    written AS (
        UPDATE {Node._meta.db_table} AS n
        SET last_heartbeat_at = %s, last_sent_at = GREATEST(b.sent_at, n.last_sent_at), lost = FALSE
        FROM b, free WHERE n.id = b.node_id AND n.id = free.id AND n.session = b.session
        RETURNING n.id
    )
    SELECT free.id, free.session, free.connected, written.id IS NOT NULL FROM free LEFT JOIN written ON written.id = free.id
"""
_T = ConsoleListening._meta.db_table
# the read lag kept is the worst of the last LISTEN_GAP (several console processes write it)
_LISTENING_SQL = f"""
    INSERT INTO {_T} (id, alive_at, listening_since, read_lag_seconds, read_lag_at) VALUES (1, %s, %s, %s, %s)
    ON CONFLICT (id) DO UPDATE SET
        listening_since = CASE WHEN {_T}.alive_at < %s THEN EXCLUDED.alive_at ELSE {_T}.listening_since END,
        alive_at = EXCLUDED.alive_at,
        read_lag_seconds = CASE WHEN {_T}.read_lag_at IS NULL OR {_T}.read_lag_at < %s
                                     OR EXCLUDED.read_lag_seconds >= {_T}.read_lag_seconds
                                THEN EXCLUDED.read_lag_seconds ELSE {_T}.read_lag_seconds END,
        read_lag_at = CASE WHEN {_T}.read_lag_at IS NULL OR {_T}.read_lag_at < %s
                                OR EXCLUDED.read_lag_seconds >= {_T}.read_lag_seconds
                           THEN EXCLUDED.read_lag_at ELSE {_T}.read_lag_at END
"""


def heartbeat(node_id: int, now: datetime | None = None) -> None:
    """One heartbeat of the node's current session, sent now (tests and tools)."""
    now = now or timezone.now()
    session = Node.objects.filter(pk=node_id).values_list("session", flat=True).first()
    if session is not None:
        record_heartbeats([Beat(node_id, session, now)], now)


def disconnected(node_id: int, session: int) -> None:
    """The connection of `session` closed; a newer connection of the node keeps it connected."""
    Node.objects.filter(pk=node_id, session=session).update(connected=False)


def _desired(node_ids: list[int]):
    """Placements that should run: current attempts of jobs that are Creating or Running."""
    return Placement.objects.filter(
        node_id__any=node_ids, state__in=HOLDING_STATES,
        attempt__job__status__in=[JobStatus.CREATING, JobStatus.RUNNING],
        attempt__number=F("attempt__job__current_attempt"),
    )


def desired_keys(node_ids: list[int]) -> dict[int, frozenset[str]]:
    """The placement keys each node should run now, for many nodes in one query (the console
    process compares them with what it last sent each node: jobs.heartbeats)."""
    keys: dict[int, set[str]] = {}
    for node_id, job_id, attempt, role in _desired(node_ids).values_list(
        "node_id", "attempt__job_id", "attempt__number", "role",
    ):
        keys.setdefault(node_id, set()).add(protocol.placement_key(job_id, attempt, role))
    return {node_id: frozenset(k) for node_id, k in keys.items()}


def desired_placements(node_id: int) -> list[protocol.Placement]:
    """What should run on this node now: current attempts of jobs that are Creating or Running."""
    return desired_placements_of([node_id])[0]


_DESIRED_COLUMNS = (
    "node_id", "role", "node_rank", "gpu_indices", "attempt__number", "attempt__master_addr", "attempt__master_port",
    "attempt__resume_step", "attempt__job_id", "attempt__job__name", "attempt__job__node_count",
    "attempt__job__gpus_per_node", "attempt__job__command", "attempt__job__script_url", "attempt__job__image_url",
    "attempt__job__registry_username", "attempt__job__registry_password_encrypted", "attempt__job__shm_size_gb",
    "attempt__job__volume_mount_path", "attempt__job__framework", "attempt__job__framework_version",
)


def desired_placements_of(node_ids: list[int]) -> list[list[protocol.Placement]]:
    """desired_placements of each node, read in one query for all (a fleet's nodes are sent
    theirs hundreds at a time as a scheduler run places a backlog). Plain values, not model
    instances: a backlog's push reads a thousand nodes' at once, and building a job and an
    attempt object per placement was most of its cost."""
    rows = _desired(node_ids).order_by("node_id", "attempt__job_id", "node_rank").values_list(*_DESIRED_COLUMNS)
    by_node: dict[int, list[protocol.Placement]] = {node_id: [] for node_id in node_ids}
    chosen: dict[int, tuple[str, str]] = {}
    grace = settings.JOB_STOP_GRACE_SECONDS
    for (node_id, role, rank, gpus, number, addr, port, resume, job_id, name, nnodes, per_node, command, script,
         image, username, password, shm, mount, framework, version) in rows:
        by_node[node_id].append(protocol.Placement(
            job_id=job_id, job_name=name, attempt=number, role=role, node_rank=rank, nnodes=nnodes,
            nproc_per_node=per_node, master_addr=addr, master_port=port, gpu_indices=list(gpus), command=command,
            script_url=script, image=image,
            registry={"username": username, "password": crypto.decrypt(password)} if username else None,
            shm_size_gb=shm, mount_path=mount, output_prefix=output_prefix(job_id, number), resume_step=resume,
            stop_grace_seconds=grace, env=checkpoint_environment(job_id),
        ))
        chosen[job_id] = (framework, version)
    # the warm pool's hints (keep / reuse prepared files) and each job's training environment,
    # each in one query for all the nodes; a policy keeps the placements' order
    flat = add_environments(policy.current().agent_hints([p for node_id in node_ids for p in by_node[node_id]]), chosen)
    result, start = [], 0
    for node_id in node_ids:
        result.append(flat[start:start + len(by_node[node_id])])
        start += len(by_node[node_id])
    return result


def checkpoint_environment(job_id: int) -> dict[str, str]:
    """Where the concurrent checkpointing library mirrors a job's checkpoints, so a failover or
    a spot resume on another node finds them; empty without object storage."""
    if not settings.S3_ENDPOINT_URL:
        return {}
    return {
        "CHECKPOINT_S3_URL": checkpoint_prefix(job_id).rstrip("/"),
        "S3_ENDPOINT_URL": settings.S3_ENDPOINT_URL,
        "S3_ACCESS_KEY": settings.S3_ACCESS_KEY,
        "S3_SECRET_KEY": settings.S3_SECRET_KEY,
    }


def fence_after_seconds() -> float:
    """How long an agent cut off from the console keeps its jobs running before it stops them.

    Long on purpose: an outage of the console or of its database or Redis must not stop
    training (the console declares nothing Lost while it does not listen). A node cut off from
    a console that does listen is declared Lost after NODE_LOST_AFTER_SECONDS and its jobs move
    on; its late messages are fenced by attempt number, and the desired state it gets when it
    reconnects stops what it still runs. This deadline bounds how long such a node can go on."""
    return float(settings.NODE_FENCE_AFTER_SECONDS)


def object_storage_settings() -> protocol.ObjectStorage:
    ensure_results_bucket()
    return protocol.ObjectStorage(
        endpoint_url=settings.S3_ENDPOINT_URL, access_key=settings.S3_ACCESS_KEY,
        secret_key=settings.S3_SECRET_KEY, results_bucket=settings.S3_RESULTS_BUCKET,
    )


def watch_heartbeats(now: datetime | None = None) -> list[str]:
    """Declare Lost the nodes that fell silent, within the grace; their placements end. Returns
    the names.

    Only a silence the console listened through counts: while the console (or its database or
    Redis) is down no heartbeat is processed, so nothing is declared until it has listened again
    for a whole grace period. A node counts from when its newest processed heartbeat was *sent*
    (how long is `liveness.silence_limit`): one whose messages wait that long in the console's
    queue is as good as cut off.
    """
    now = now or timezone.now()
    grace = timedelta(seconds=settings.NODE_LOST_AFTER_SECONDS)
    listening = ConsoleListening.objects.filter(pk=1).first()
    if listening is None or listening.alive_at < now - LISTEN_GAP or listening.listening_since > now - grace:
        return []
    limit = liveness.silence_limit(
        settings.NODE_LOST_AFTER_SECONDS, settings.NODE_WATCH_SECONDS, settings.NODE_HEARTBEAT_SECONDS,
        listening.read_lag_seconds,
    )
    if limit > settings.NODE_LOST_AFTER_SECONDS:
        # a console reading heartbeats late (a backlog of its own) must not blame the nodes for it
        log.warning("the console reads heartbeats %.0f s late: nodes are declared Lost after %.0f s of silence",
                    listening.read_lag_seconds, limit)
    cutoff = now - timedelta(seconds=limit)
    silent = Q(last_sent_at__lt=cutoff) | Q(last_sent_at__isnull=True, last_heartbeat_at__lt=cutoff) \
        | Q(last_sent_at__isnull=True, last_heartbeat_at__isnull=True)
    names = []
    for node in Node.objects.filter(silent, lost=False):
        with transaction.atomic():
            # asked again as the node is declared: this run may have waited a while behind row
            # locks since it listed the node, and a heartbeat written meanwhile is proof of life
            if not Node.objects.filter(silent, pk=node.pk, lost=False).update(lost=True, connected=False):
                continue  # it beat meanwhile, or another watchdog run won
            names.append(node.name)
            for placement in Placement.objects.filter(node=node, state__in=HOLDING_STATES).select_related("attempt"):
                _placement_lost(placement, node)
            # a connection it may still have must say hello again: the node is disconnected now
            # and its next hello reconciles what it still runs (forget_unknown_placements)
            transaction.on_commit(functools.partial(live.publish, node_group(node.pk), {"type": "node.lost"}))
    # level-triggered: a scheduler run that read a node as online just before it was declared
    # Lost may commit placements there afterwards; nothing would ever start or end them
    late = Placement.objects.filter(node__lost=True, state__in=HOLDING_STATES).select_related("attempt", "node")
    for placement in late:
        with transaction.atomic():
            _placement_lost(placement, placement.node)
    return names


@dataclass(frozen=True)
class Session:
    """A node's new session, as its hello opened it."""

    node: Node
    gone: list[str]  # placements it came back without (treated as lost)
    object_storage: protocol.ObjectStorage


def start_session(token: NodeToken, hello: protocol.Hello) -> Session:
    """Everything a hello asks of the database, in one trip to the agents' threads: behind a
    fleet reconnecting, each trip waits its turn, and until the welcome the node's heartbeats
    are not read (a hello that took 30 s got a live node declared Lost)."""
    node = register(token, hello["node"])
    gone = forget_unknown_placements(node.pk, hello.get("running") or [], hello.get("ended") or [])
    return Session(node, gone, object_storage_settings())


def forget_unknown_placements(node_id: int, running: list[protocol.RunningRef], ended: list[protocol.RunningRef] = ()) -> list[str]:
    """After a hello: placements the console thinks run on the node but its agent neither runs
    nor saw end (it restarted with an empty work dir, or another agent process replaced it) are
    lost — their processes went with the old agent. Those merely assigned wait for the desired
    state; those the agent saw end have their exit reports on the way. Returns their keys."""
    known = {protocol.placement_key(r["job_id"], r["attempt"], r["role"]) for r in [*running, *ended]}
    node = Node.objects.get(pk=node_id)
    gone = []
    started = Placement.objects.filter(node_id=node_id, state__in=[PlacementState.PREPARING, PlacementState.RUNNING])
    for placement in started.select_related("attempt"):
        key = protocol.placement_key(placement.attempt.job_id, placement.attempt.number, placement.role)
        if key not in known:
            with transaction.atomic():
                _placement_lost(placement, node, agent_restarted=True)
            gone.append(key)
    return gone


def _placement_lost(placement: Placement, node: Node, agent_restarted: bool = False) -> None:
    job = TrainingJob.objects.select_for_update().filter(pk=placement.attempt.job_id).first()
    if not Placement.objects.filter(pk=placement.pk, state__in=HOLDING_STATES).update(
        state=PlacementState.LOST, ended_at=timezone.now(),
        message=f"the agent of node {node.name} came back without it" if agent_restarted else f"node {node.name} lost",
    ):
        return  # it ended meanwhile (its exit report, or another watchdog run)
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
        evidence = failover.evidence_for(placement, node_lost=not agent_restarted, agent_restarted=agent_restarted)
        failover.interrupted(job, placement, evidence)


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

    if kind not in protocol.FAULT_KINDS:
        raise ValueError(f"unknown fault kind {kind!r} (known: {', '.join(protocol.FAULT_KINDS)})")
    if kind == "xid" and xid is None:
        raise ValueError("an XID fault needs its XID number")
    if xid is not None and not 1 <= xid <= MAX_INT:
        raise ValueError(f"an XID is a number from 1 to {MAX_INT}")
    if gpu_index is not None and not 0 <= gpu_index <= MAX_SMALLINT:
        raise ValueError(f"a GPU index is a number from 0 to {MAX_SMALLINT}")
    message = protocol.InjectFault(type="inject_fault", gpu_index=gpu_index, kind=kind, xid=xid, detail=detail)
    live.publish(node_group(node_id), {"type": "node.inject", "message": message})


@transaction.atomic
def reclaim_from_spot(node_id: int, reason: str) -> int:
    """Interrupt the spot jobs running on a node and cordon it so none lands there again."""
    actions.set_cordon(node_id, True, reason)
    job_ids = set(Placement.objects.filter(
        node_id=node_id, state__in=HOLDING_STATES, attempt__job__learning_type="spot",
        attempt__job__status__in=[JobStatus.CREATING, JobStatus.RUNNING],
    ).values_list("attempt__job_id", flat=True))
    for job in TrainingJob.objects.select_for_update().filter(pk__in=job_ids):
        failover.pause_spot(job, reason)
    return len(job_ids)
