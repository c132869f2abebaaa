"""Node registry actions: agent authentication, registration, liveness, cordon, desired state."""

from __future__ import annotations

import functools
import hmac
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from console.lib import live
from nodeagent import protocol

from .. import actions
from ..channel.notify import node_group, schedule_on_commit
from ..choices import JobStatus
from ..models import (
    ConsoleListening,
    Node,
    NodeGPU,
    NodeToken,
    Placement,
    PlacementState,
    ServerType,
    TrainingJob,
)
from ..models.attempts import HOLDING_STATES
from ..recovery import failover
from ..sql import bulk
from ..storage import credentials
from . import liveness
from .models import hash_token

log = logging.getLogger(__name__)


class AgentRefused(Exception):
    """The agent may not connect; the message is sent to it verbatim."""


class NodeInUse(AgentRefused):
    """The node's connection is alive and this hello did not present its session's resume
    secret: refused, and nothing of the node changed (the agent retries with backoff)."""


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
def register(token: NodeToken, info: protocol.NodeInfo, resume: str = "") -> tuple[Node, str]:
    """Create or update the node from its hello; it is connected and alive again, under a new
    session: a connection of an older session can no longer act for it (jobs.channel.consumer).
    Returns the node and the new session's resume secret (for the welcome; only its hash is kept).

    Refused (NodeInUse), changing nothing, while the node's connection is alive and `resume` is
    not that session's secret: whoever holds the token must not take a live agent's place (its
    hello would make the console forget the placements and hand over their desired state)."""
    if info["name"] != token.name:
        raise AgentRefused(f"this token registers node {token.name!r}, not {info['name']!r}")
    server_type = ServerType.objects.filter(name=info["server_type"]).first()
    if server_type is None:
        names = ", ".join(ServerType.objects.values_list("name", flat=True))
        raise AgentRefused(f"unknown server type {info['server_type']!r} (known: {names})")
    now = timezone.now()
    # locked until the commit: two hellos of one node decide one after the other
    current = Node.objects.select_for_update().filter(name=info["name"]).first()
    if current is not None and in_use(current, resume, now):
        raise NodeInUse(
            f"node {current.name!r} is connected over another connection whose agent is alive, and this hello "
            "did not present that session's resume secret: refused, nothing changed (is a second agent running "
            "with this node's token?). An agent that restarted is accepted once the console sees its old "
            f"connection gone (closed, or silent for {settings.NODE_LOST_AFTER_SECONDS} s); retrying",
        )
    secret = secrets.token_urlsafe(32)
    node, _ = Node.objects.select_for_update().update_or_create(
        name=info["name"],
        defaults={
            "server_type": server_type, "address": info["address"], "cpus": info["cpus"],
            "memory_gb": info["memory_gb"], "runtime": info["runtime"], "agent_version": info["agent_version"],
            "connected": True, "lost": False, "last_heartbeat_at": now, "last_sent_at": now,
            "resume_hash": hash_token(secret), "closed_at": None,
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
    return node, secret


def in_use(node: Node, resume: str, now: datetime) -> bool:
    """Whether a hello presenting `resume` must leave `node` to its current connection: that
    connection is alive (connected, and heartbeats came within the lost grace) and `resume` is
    not its session's secret. A node whose connection closed (an agent restart), or fell silent
    (a restart after a silent network cut), is free again."""
    alive = node.connected and node.last_heartbeat_at is not None \
        and node.last_heartbeat_at >= now - timedelta(seconds=settings.NODE_LOST_AFTER_SECONDS)
    resumes = bool(resume) and bool(node.resume_hash) and hmac.compare_digest(hash_token(resume), node.resume_hash)
    return alive and not resumes


# The console listens when its heartbeat flushers write (every FLUSH_SECONDS, jobs.channel.heartbeats);
# a pause longer than this means it did not (down, or its database or Redis was).
LISTEN_GAP = timedelta(seconds=10)
# how often a console process flushes the heartbeats it read (jobs.channel.heartbeats.FLUSH_SECONDS)
FLUSH_INTERVAL = timedelta(seconds=2)


@dataclass(frozen=True)
class Beat:
    node_id: int
    session: int
    sent_at: datetime  # when the agent sent it, on the console's clock


@dataclass(frozen=True)
class Close:
    """A node's connection closed without the console asking (jobs.channel.heartbeats)."""

    node_id: int
    session: int
    at: datetime


@dataclass(frozen=True)
class Flushed:
    """What a flush of heartbeats found, node by node."""

    replaced: frozenset[int] = frozenset()  # a newer connection of the node took over: close this one
    declared_lost: frozenset[int] = frozenset()  # the node's row says disconnected (declared Lost): connect again
    busy: frozenset[int] = frozenset()  # another transaction holds the node's row: try at the next flush


def record_heartbeats(beats: list[Beat], now: datetime | None = None, closes: Sequence[Close] = (),
                      extra_lag: float = 0.0) -> Flushed:
    """Store processed heartbeats in one statement, then that the console is listening.

    One transaction, listening last: the watchdog must never read "the console listens" while
    the beats it processed are not written. A node row another transaction holds (the watchdog
    declaring it, a hello) is skipped rather than waited for: one locked row must not hold up
    the whole fleet's beats (its beat is written at the next flush).

    `closes` (connections that closed unasked) mark their nodes closed, if no newer session
    took over meanwhile: the watchdog declares them Lost after NODE_CLOSED_GRACE_SECONDS.
    """
    now = now or timezone.now()
    found: dict[int, tuple[int, bool, bool]] = {}
    with transaction.atomic(), connection.cursor() as cursor:
        if beats:
            cursor.execute(_HEARTBEATS_SQL, [
                bulk.rows_param([[b.node_id for b in beats], [b.session for b in beats], [b.sent_at for b in beats]]), now,
            ])
            found = {node_id: (session, connected, written) for node_id, session, connected, written in cursor.fetchall()}
        for close in closes:
            Node.objects.filter(pk=close.node_id, session=close.session, connected=False, lost=False).update(closed_at=close.at)
        written = [b for b in beats if b.node_id in found and found[b.node_id][2]]
        # `extra_lag`: how long hellos waited for their answer (their nodes' beats waited behind them)
        lag = max([(now - b.sent_at).total_seconds() for b in written] + [extra_lag], default=0.0)
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


def fence_after_seconds() -> float:
    """How long an agent cut off from the console keeps its jobs running before it stops them.

    Long on purpose: an outage of the console or of its database or Redis must not stop
    training (the console declares nothing Lost while it does not listen). A node cut off from
    a console that does listen is declared Lost after NODE_LOST_AFTER_SECONDS and its jobs move
    on; its late messages are fenced by attempt number, and the desired state it gets when it
    reconnects stops what it still runs. This deadline bounds how long such a node can go on."""
    return float(settings.NODE_FENCE_AFTER_SECONDS)


def watch_heartbeats(now: datetime | None = None) -> list[str]:
    """Declare Lost the nodes that fell silent, within the grace; their placements end. Returns
    the names.

    A node whose agent's connection closed unasked and did not come back within
    NODE_CLOSED_GRACE_SECONDS is declared too, however recent its last beat (`closed_at`).

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
    # counted up to the console's newest flush, not to now: a console process whose loop stalled
    # for a few seconds (a fleet connecting at once) read nobody's beats meanwhile, and must not
    # blame every node for its own stall (with a 10 s grace, a 6 s stall would have)
    heard_until = min(now, listening.alive_at + FLUSH_INTERVAL)
    # an agent whose connection closed is back within its first backoff, plus however late the
    # console reads (a console that answers handshakes slowly must not make it look gone)
    closed_grace = settings.NODE_CLOSED_GRACE_SECONDS + listening.read_lag_seconds
    cutoff = heard_until - timedelta(seconds=limit)
    silent = Q(last_sent_at__lt=cutoff) | Q(last_sent_at__isnull=True, last_heartbeat_at__lt=cutoff) \
        | Q(last_sent_at__isnull=True, last_heartbeat_at__isnull=True) \
        | Q(connected=False, closed_at__lt=heard_until - timedelta(seconds=closed_grace))
    names = []
    for node in Node.objects.filter(silent, lost=False):
        with transaction.atomic():
            # asked again as the node is declared: this run may have waited a while behind row
            # locks since it listed the node, and a heartbeat written meanwhile is proof of life
            if not Node.objects.filter(silent, pk=node.pk, lost=False).update(lost=True, connected=False):
                continue  # it beat meanwhile, or another watchdog run won
            names.append(node.name)
            how = "" if node.closed_at is None or node.connected else "lost its agent's connection, which did not come back"
            for placement in Placement.objects.filter(node=node, state__in=HOLDING_STATES).select_related("attempt"):
                _placement_lost(placement, node, how=how)
            # a connection it may still have must say hello again: the node is disconnected now
            # and its next hello reconciles what it still runs (forget_unknown_placements)
            # naming the session declared: a newer connection of the node (its agent came back
            # meanwhile, e.g. after its old connection closed) must not take it for itself
            transaction.on_commit(functools.partial(
                live.publish, node_group(node.pk), {"type": "node.lost", "session": node.session}))
    # level-triggered: a scheduler run that read a node as online just before it was declared
    # Lost may commit placements there afterwards; nothing would ever start or end them
    late = Placement.objects.filter(node__lost=True, state__in=HOLDING_STATES).select_related("attempt", "node")
    for placement in late:
        with transaction.atomic():
            _placement_lost(placement, placement.node)
    return names


def said_goodbye(node_id: int, session: int, reason: str) -> bool:
    """The node's agent is exiting cleanly: the node is gone now (Lost until it says hello again)
    and its jobs move on at once instead of after the heartbeat grace. False when a newer session
    holds the node (this goodbye is an old connection's) or it was declared already."""
    with transaction.atomic():
        if not Node.objects.filter(pk=node_id, session=session, lost=False).update(
            lost=True, connected=False, closed_at=timezone.now(),
        ):
            return False
        node = Node.objects.get(pk=node_id)
        how = f"went away: its agent shut down ({reason})" if reason else "went away: its agent shut down"
        for placement in Placement.objects.filter(node=node, state__in=HOLDING_STATES).select_related("attempt"):
            _placement_lost(placement, node, how=how)
    log.warning("node %s said goodbye: %s", node.name, reason)
    return True


@dataclass(frozen=True)
class Session:
    """A node's new session, as its hello opened it."""

    node: Node
    gone: list[str]  # placements it came back without (treated as lost)
    resume: str  # the session's resume secret, for the welcome (only its hash is stored)


def start_session(token: NodeToken, hello: protocol.Hello) -> Session:
    """Everything a hello asks of the database, in one trip to the agents' threads: behind a
    fleet reconnecting, each trip waits its turn, and until the welcome the node's heartbeats
    are not read (a hello that took 30 s got a live node declared Lost)."""
    node, resume = register(token, hello["node"], hello.get("resume") or "")
    gone = forget_unknown_placements(node.pk, hello.get("running") or [], hello.get("ended") or [])
    return Session(node, gone, resume)


def forget_unknown_placements(node_id: int, running: list[protocol.RunningRef], ended: Sequence[protocol.RunningRef] = ()) -> list[str]:
    """After a hello: placements the console thinks run on the node but its agent neither runs
    nor saw end (it restarted with an empty work dir, or a new agent process took the node once
    the old one's connection was gone) are lost — their processes went with the old agent. Those merely assigned wait for the desired
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


def _placement_lost(placement: Placement, node: Node, agent_restarted: bool = False, how: str = "") -> None:
    job = TrainingJob.objects.select_for_update().filter(pk=placement.attempt.job_id).first()
    if not Placement.objects.filter(pk=placement.pk, state__in=HOLDING_STATES).update(
        state=PlacementState.LOST, ended_at=timezone.now(),
        message=f"the agent of node {node.name} came back without it" if agent_restarted else f"node {node.name} lost",
    ):
        return  # it ended meanwhile (its exit report, or another watchdog run)
    credentials.request_sweep_on_commit()  # its attempt's storage keys go once nothing of it holds
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
        evidence = failover.evidence_for(placement, node_lost=not agent_restarted, agent_restarted=agent_restarted,
                                         lost_how=how)
        failover.interrupted(job, placement, evidence)
