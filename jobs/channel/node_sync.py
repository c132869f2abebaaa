"""Hearing which agents' desired state changed: one Redis message per commit, however many nodes.

A scheduler run that places a backlog changes the desired state of hundreds of nodes at once.
Sent as one channel-layer event per node (a group send costs several Redis round trips, then
one delivery into a console process's queue each), the push took as long as the run itself, and
the placed GPUs waited for it. Now a commit publishes its nodes' ids in one message on a Redis
channel (jobs.channel.notify.publish_node_sync); every console process holds one subscription and tells
the agent connections it serves to send their desired state again (jobs.channel.consumer reads
them together).

Pub/sub keeps nothing for a process that is not subscribed at that moment. What it misses (Redis
away, a process resubscribing) is made up by the heartbeat book's desired-state check
(jobs.channel.heartbeats), and a subscription that broke asks, once it is back, every connection of the
process to send its desired state again: nothing published meanwhile waits for that check.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import Iterable

import redis.asyncio
from django.conf import settings

from .heartbeats import BOOK, AgentConnection
from .notify import node_sync_channel

log = logging.getLogger(__name__)
RESUBSCRIBE_SECONDS = 1.0


class Listener:
    """This console process's subscription (one per event loop: daphne has one)."""

    def __init__(self) -> None:
        self._tasks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]] = weakref.WeakKeyDictionary()

    def ensure_listening(self) -> None:
        loop = asyncio.get_running_loop()
        task = self._tasks.get(loop)
        if task is None or task.done():
            self._tasks[loop] = loop.create_task(self._listen())

    async def _listen(self) -> None:
        lost = False  # the subscription broke: what was published meanwhile went unheard
        while True:
            client = redis.asyncio.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2)
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.subscribe(node_sync_channel())
                    if lost:
                        tell(list(BOOK.connections.values()))
                        lost = False
                    async for message in pubsub.listen():
                        if message["type"] == "message":
                            wanted = set(json.loads(message["data"]))
                            tell(c for (node_id, _), c in list(BOOK.connections.items()) if node_id in wanted)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("the desired-state channel was lost; subscribing again", exc_info=True)
                lost = True
                await asyncio.sleep(RESUBSCRIBE_SECONDS)
            finally:
                await client.aclose()


def tell(connections: Iterable[AgentConnection]) -> None:
    for connection in connections:
        connection.want_desired()


LISTENER = Listener()
