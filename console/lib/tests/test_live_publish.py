"""Live events to many groups at once (a scheduler run notifying thousands of jobs and nodes)."""

from __future__ import annotations

import asyncio

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from console.lib import live


class CountingLayer:
    """A channel layer whose Redis pool is as small as the settings allow: it refuses a send
    beyond its connections, as channels_redis does ("Too many connections")."""

    def __init__(self, connections: int) -> None:
        self.connections, self.in_flight = connections, 0
        self.received: dict[str, list[int]] = {}

    async def group_send(self, group: str, message: dict) -> None:
        if self.in_flight >= self.connections:
            raise ConnectionError("Too many connections")
        self.in_flight += 1
        try:
            await asyncio.sleep(0.001)  # a round trip to Redis
            self.received.setdefault(group, []).append(message["n"])
        finally:
            self.in_flight -= 1


def test_every_group_of_a_big_fan_out_gets_its_events_in_order_within_the_pool(monkeypatch):
    smallest_pool = 64  # CHANNEL_LAYER_MAX_CONNECTIONS' minimum
    assert settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]["max_connections"] >= smallest_pool
    layer = CountingLayer(smallest_pool)
    monkeypatch.setattr(live, "get_channel_layer", lambda: layer)
    groups = [f"job-{n}" for n in range(2000)]
    live.publish_many([(group, {"type": "job.reason", "n": n}) for n in (1, 2) for group in groups])
    assert layer.received == {group: [1, 2] for group in groups}  # none refused, each group in order


def test_events_go_only_to_groups_someone_is_in_and_reach_them_in_order(monkeypatch):
    """Most of a fleet's events have nobody to reach (thousands of status changes, a few pages
    open): groups without a member are not sent to, and a member gets all of its own."""
    layer = get_channel_layer()  # the real Redis layer
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("job-watched", channel)
    sent_to, real_send = [], layer.group_send

    async def counting_send(group: str, message: dict) -> None:
        sent_to.append(group)
        await real_send(group, message)

    monkeypatch.setattr(layer, "group_send", counting_send)
    try:
        live.publish_many([("job-watched", {"type": "job.status", "n": 1}), ("job-nobody", {"type": "job.status", "n": 2}),
                           ("user-nobody", {"type": "job.status", "n": 3}), ("job-watched", {"type": "job.status", "n": 4})])
        async def two() -> list[int]:
            return [(await layer.receive(channel))["n"] for _ in range(2)]

        received = async_to_sync(two)()
    finally:
        async_to_sync(layer.group_discard)("job-watched", channel)
    assert sent_to == ["job-watched", "job-watched"]
    assert received == [1, 4]
