"""Telling node agents that their desired state changed (through their consumer's group)."""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from collections.abc import Iterable

import redis
from celery import current_app
from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)


def node_group(node_id: int) -> str:
    return f"node-{node_id}"


def node_sync_channel() -> str:
    """The Redis channel that tells console processes which nodes' desired state changed (one
    per console prefix and Redis database: pub/sub knows no databases, and test workers or a
    benchmark share the server)."""
    prefix = settings.CHANNEL_LAYERS["default"]["CONFIG"].get("prefix", "simpleai")
    return f"{prefix}:node-sync:{_flags().connection_pool.connection_kwargs.get('db', 0)}"


def publish_node_sync(node_ids: Iterable[int]) -> None:
    """Ask the console processes serving these nodes to send them their desired state, in one
    message (jobs.channel.node_sync); never raises: what triggered it is committed, and the heartbeat
    book's check sends a desired state that a lost push left out of date."""
    ids = sorted(set(node_ids))
    if not ids:
        return
    try:
        _flags().publish(node_sync_channel(), json.dumps(ids))
    except redis.RedisError:
        log.warning("could not push the desired state of %d node(s); their console sends it within seconds", len(ids))


def sync_nodes_on_commit(node_ids: Iterable[int | None]) -> None:
    """After the current transaction commits, make these nodes' agents re-read their desired state."""
    ids = {node_id for node_id in node_ids if node_id is not None}
    if ids:
        transaction.on_commit(lambda: publish_node_sync(ids))


# Set while a scheduler run is queued: events meanwhile ask for nothing more (a run reads every
# waiting job), so a burst of events costs one run, not one task each. The run clears it before
# it reads, so an event during a run queues exactly one more. The expiry bounds a lost task.
SCHEDULE_REQUESTED = "simpleai:scheduler:requested"
REQUEST_EXPIRY_SECONDS = 60


@functools.cache
def _flags() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=2)


def request_schedule() -> None:
    """Ask for a scheduler run (jobs.tasks.schedule_jobs), by name: this module sits below the tasks.

    Never raises: what triggered it is committed already, and the scheduler's periodic tick
    makes up for a request the broker did not take (Redis down).
    """
    try:
        if _flags().set(SCHEDULE_REQUESTED, "1", nx=True, ex=REQUEST_EXPIRY_SECONDS):
            current_app.send_task("jobs.tasks.schedule_jobs")
    except Exception:
        log.warning("could not ask for a scheduler run; the next tick does it", exc_info=True)


def schedule_request_taken() -> None:
    """Called by a scheduler run before it reads: later events queue the next run."""
    try:
        _flags().delete(SCHEDULE_REQUESTED)
    except redis.RedisError:
        log.warning("could not clear the scheduler request flag; it expires by itself", exc_info=True)


class _Asker:
    """Asks for scheduler runs from one thread of this process: commits that come while it asks
    are covered by its next request, so a thousand agent messages a second cost a few Redis
    calls, not one each on the agents' database threads. Every commit is followed by a request
    that begins after it, so no event is missed."""

    def __init__(self) -> None:
        self.wanted = threading.Event()
        self.lock = threading.Lock()
        self.pid = 0  # the process whose thread runs (a forked child starts its own)

    def ask(self) -> None:
        self.wanted.set()
        if self.pid != os.getpid():
            with self.lock:
                if self.pid != os.getpid():
                    threading.Thread(target=self._run, name="scheduler-requests", daemon=True).start()
                    self.pid = os.getpid()

    def _run(self) -> None:
        while True:
            self.wanted.wait()
            self.wanted.clear()
            request_schedule()


_ASKER = _Asker()


def schedule_on_commit() -> None:
    """Run the scheduler once the current transaction's changes are visible."""
    transaction.on_commit(_ASKER.ask)
