"""Sending live events to browsers and agents (Channels groups) without holding a database thread.

Code running in one of daphne's worker threads (agent messages, API requests) hands each event
to one sender task on daphne's event loop and goes on; the sender sends them in the order they
came, so a page never sees an older status after a newer one. Anywhere else (a Celery worker,
a management command, a test without a running server loop) the event is sent at once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)
MAX_QUEUED = 100_000  # beyond this (Redis far behind) events are dropped: pages re-read on reload

_loop: asyncio.AbstractEventLoop | None = None
_queue: asyncio.Queue[tuple[str, dict[str, Any]]] | None = None
_lock = threading.Lock()


def attach(loop: asyncio.AbstractEventLoop) -> None:
    """Called on the server's event loop (console.asgi): its worker threads publish through it.
    Only the main thread's loop is the server's (daphne's reactor). A loop that runs one call in
    a worker thread (asgiref's async_to_sync, a test's communicator) is closed when the call ends,
    and cancelling a sender caught inside a Redis send there can keep that loop from closing."""
    if threading.current_thread() is not threading.main_thread():
        return
    global _loop, _queue
    with _lock:
        if _loop is loop and _queue is not None:
            return
        _loop, _queue = loop, asyncio.Queue(MAX_QUEUED)
        loop.create_task(_send_in_order(_queue))


def detach() -> None:
    """Forget the server loop (its server stopped, or a test's loop outlived the test): events are
    sent where they are made until the next WebSocket attaches a loop again."""
    global _loop, _queue
    with _lock:
        _loop = _queue = None


# events the server loop's sender takes from its queue at once
SEND_BATCH = 1000


async def _send_in_order(queue: asyncio.Queue[tuple[str, dict[str, Any]]]) -> None:
    layer = get_channel_layer()
    while True:
        items = [await queue.get()]
        while not queue.empty() and len(items) < SEND_BATCH:
            items.append(queue.get_nowait())
        try:
            await _send_all(layer, items)  # a group's events in order, each batch after the last
        except Exception:  # e.g. the layer is misconfigured: the sender must go on
            log.warning("could not publish %d live event(s)", len(items), exc_info=True)


def _enqueue(queue: asyncio.Queue[Any], items: list[tuple[str, dict[str, Any]]]) -> None:
    for item in items:
        try:
            queue.put_nowait(item)
        except asyncio.QueueFull:
            log.warning("live events queue full: dropped %s to %s", item[1].get("type"), item[0])


def _queued(items: list[tuple[str, dict[str, Any]]]) -> bool:
    """Hand the events to the server loop's sender when there is one, all in one hand-over (a
    batch of agents' reports starts or completes hundreds of jobs: one wake-up of the loop, not
    one per event); False means send them here."""
    loop, queue = _loop, _queue
    if loop is None or queue is None or not loop.is_running() or loop.is_closed():
        return False
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:  # a worker thread: no loop of its own
        running = None
    if running is loop:  # already on the server loop (an async consumer)
        _enqueue(queue, items)
        return True
    if running is not None:  # some other loop (a test's): send directly
        return False
    try:
        loop.call_soon_threadsafe(_enqueue, queue, items)
        return True
    except RuntimeError:  # the loop closed meanwhile
        return False


def publish(group: str, message: dict[str, Any]) -> None:
    """Send `message` to a Channels group; never raises (a lost live event costs a reload)."""
    publish_many([(group, message)])


def publish_many(items: list[tuple[str, dict[str, Any]]]) -> None:
    """Send several events; outside the server loop all of them in one event loop (a scheduler
    run may notify a thousand nodes: one loop and one Redis pool, not one of each per node)."""
    if not items or _queued(list(items)):
        return
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(_send_all)(layer, items)
    except Exception:  # e.g. called inside some other running loop
        log.warning("could not publish %d live event(s)", len(items), exc_info=True)


# groups sent to at once: a run that notifies thousands must stay well inside the layer's Redis
# pool (CHANNEL_LAYER_MAX_CONNECTIONS), or the sends beyond it fail with "Too many connections"
SEND_CONCURRENCY = 32


async def _send_all(layer: Any, items: list[tuple[str, dict[str, Any]]]) -> None:
    by_group: dict[str, list[dict[str, Any]]] = {}
    for group, message in items:
        by_group.setdefault(group, []).append(message)
    listened = await _listened(layer, list(by_group))
    by_group = {group: messages for group, messages in by_group.items() if group in listened}
    slots = asyncio.Semaphore(SEND_CONCURRENCY)

    async def send_in_order(group: str, messages: list[dict[str, Any]]) -> None:
        async with slots:
            for message in messages:  # one group's events keep their order
                await layer.group_send(group, message)

    results = await asyncio.gather(*(send_in_order(g, m) for g, m in by_group.items()), return_exceptions=True)
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:  # Redis down: pages show the truth on reload, agents resync
        log.warning("could not publish to %d of %d group(s): %s", len(failed), len(by_group), failed[0])


# the member count of each group key, in one command: a pipeline of one ZCARD per group cost
# redis-py more to pack and parse than the sends it saved (a fleet's status changes name thousands)
_COUNT_MEMBERS = "local counts = {} for i, key in ipairs(KEYS) do counts[i] = redis.call('ZCARD', key) end return counts"


async def _listened(layer: Any, groups: list[str]) -> set[str]:
    """The groups that have a member now, asked in one command per Redis server: most events
    have nobody to reach (a fleet's thousands of status changes a minute, a few pages open), and
    channels_redis' group_send costs two round trips even for an empty group. A member that
    joins just after this misses the event, as it would had it joined just after the send (pages
    and agents read the current state when they connect). Any doubt: every group."""
    group_key = getattr(layer, "_group_key", None)  # channels_redis 4's layer (pinned)
    if group_key is None or len(groups) < 2:
        return set(groups)
    try:
        by_server: dict[int, list[str]] = {}
        for group in groups:
            by_server.setdefault(layer.consistent_hash(group), []).append(group)
        found: set[str] = set()
        for server, names in by_server.items():
            count = layer.connection(server).register_script(_COUNT_MEMBERS)  # EVALSHA, loaded once
            counts = await count(keys=[group_key(name) for name in names])
            found.update(name for name, members in zip(names, counts, strict=True) if members)
        return found
    except Exception:
        log.warning("could not ask which groups have members; sending to all", exc_info=True)
        return set(groups)
