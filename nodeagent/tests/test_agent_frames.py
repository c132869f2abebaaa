"""Batched frames: an agent sends a burst of spooled messages as one frame once the console
says it takes them, and one message per frame to a console that does not (an older one)."""

from __future__ import annotations

import asyncio
import json

from nodeagent.connection import frames
from nodeagent.protocol_checks import MAX_FRAME_CHARS
from nodeagent.tests.agent_support import (
    FakeConsole,
    make_config,
    make_placement,
    running_agent,
    running_console,
    until,
)

COMMAND = "echo one; echo two; echo three"


def spooled(count: int, text: str = "x") -> list[tuple[int, str]]:
    return [(i, json.dumps({"type": "logs", "msg_id": i, "text": text})) for i in range(1, count + 1)]


def test_frames_of_one_message_are_the_message_itself():
    batch = spooled(3)
    assert list(frames(batch, 1)) == [(text, msg_id) for msg_id, text in batch]


def test_frames_carry_up_to_the_limit_in_order_and_name_their_last_message():
    batch = spooled(7)
    sent = list(frames(batch, 3))
    assert [last for _, last in sent] == [3, 6, 7]
    assert [json.loads(frame)["msg_id"] for frame, _ in sent if not frame.startswith("[")] == [7]  # alone: itself
    received = [m for frame, _ in sent for m in (json.loads(frame) if frame.startswith("[") else [json.loads(frame)])]
    assert [m["msg_id"] for m in received] == list(range(1, 8))


def test_a_message_too_long_to_share_a_frame_goes_alone():
    long = "y" * MAX_FRAME_CHARS
    batch = [*spooled(1), (2, json.dumps({"type": "logs", "msg_id": 2, "text": long})), (3, json.dumps({"msg_id": 3}))]
    assert [last for _, last in frames(batch, 64)] == [1, 2, 3]


def _output(console: FakeConsole) -> list[str]:
    return [text for text in console.texts() if not text.startswith("[")]  # the command's, not the agent's


def _run(tmp_path, batch_limit: int | None) -> FakeConsole:
    async def scenario() -> FakeConsole:
        console = FakeConsole([make_placement(command=COMMAND)])
        console.batch_limit = batch_limit
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)) as agent:
            await until(lambda: console.exited() and not len(agent.spool), what="everything acknowledged")
        return console

    return asyncio.run(scenario())


def test_an_agent_told_a_batch_limit_sends_bursts_as_one_frame(tmp_path):
    console = _run(tmp_path, batch_limit=64)
    assert max(console.frame_sizes) > 1
    ids = [m["msg_id"] for m in console.messages if "msg_id" in m]
    assert ids == list(range(1, len(ids) + 1))  # in order, each once
    assert _output(console) == ["one", "two", "three"] and console.exited()["exit_code"] == 0


def test_an_agent_not_told_a_batch_limit_sends_one_message_per_frame(tmp_path):
    console = _run(tmp_path, batch_limit=None)
    assert set(console.frame_sizes) == {1}
    assert _output(console) == ["one", "two", "three"] and console.exited()["exit_code"] == 0
