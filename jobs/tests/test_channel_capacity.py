"""Every socket of one console process shares one Redis queue of the channel layer (channels_redis
keys a process's channels together), and what goes over its capacity is dropped: a scheduler run
that pushes the desired state of hundreds of nodes at once must reach every one of them."""

from __future__ import annotations

import asyncio
import uuid

from channels.layers import get_channel_layer

NODES = 500  # sockets of one daphne; channels_redis' default capacity (100) dropped 400 of them


def test_a_push_to_every_node_connected_to_one_console_process_reaches_each_of_them():
    layer = get_channel_layer()
    run = uuid.uuid4().hex[:8]

    async def scenario() -> int:
        channels = [await layer.new_channel() for _ in range(NODES)]
        groups = [f"capacity-{run}-{n}" for n in range(NODES)]
        for group, channel in zip(groups, channels, strict=True):
            await layer.group_add(group, channel)
        try:
            for group in groups:  # as a scheduler run does: before any socket reads its push
                await layer.group_send(group, {"type": "node.sync"})
            received = [await asyncio.wait_for(layer.receive(channel), timeout=10) for channel in channels]
        finally:
            for group, channel in zip(groups, channels, strict=True):
                await layer.group_discard(group, channel)
        return sum(message["type"] == "node.sync" for message in received)

    assert asyncio.run(scenario()) == NODES
