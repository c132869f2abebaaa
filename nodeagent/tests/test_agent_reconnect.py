"""The console goes away mid-run: nothing the agent spooled is lost, nothing new jumps the queue."""

from __future__ import annotations

import asyncio
import json
import time

from nodeagent.connection import Backoff
from nodeagent.tests.agent_support import (
    FakeConsole,
    make_config,
    make_placement,
    running_agent,
    running_console,
    until,
)

COMMAND = "echo one; sleep 0.3; echo two; sleep 0.3; echo three"


def test_it_resends_unacked_messages_after_the_console_comes_back(tmp_path):
    async def scenario():
        console = FakeConsole([make_placement(command=COMMAND)])
        console.ack = False  # the first console acknowledges nothing before it dies

        async def crash_when_running(ws, message):
            if message.get("state") == "running":
                console.crash(ws)

        console.on_message = crash_when_running
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)) as agent:
            await until(lambda: "running" in console.states(), what="the running report")
            # while the console is down (connections refused) the command finishes: its lines
            # and its exit report accumulate in the spool
            await until(lambda: any(m.get("state") == "exited" for _, m in _spooled(agent)), what="exit spooled")
            first = list(console.messages)
            console.ack, console.on_message = True, None
            async with running_console(console, port):
                await until(lambda: console.exited() and not len(agent.spool), what="everything acked")
        return console, first

    console, first = asyncio.run(scenario())
    assert len(console.connections) == 2
    assert console.hellos[0]["running"] == []
    texts = console.texts()
    assert texts.count("one") == texts.count("two") == texts.count("three") == 1
    assert "three" not in [line[2] for m in first if m["type"] == "logs" for line in m["lines"]]
    assert "[INFO] Command exited with code 0" in texts
    lines = console.lines()
    assert [line[0] for line in lines] == list(range(1, len(lines) + 1))
    # after the reconnect the unacknowledged messages come again, from msg_id 1, in order
    resent = [m["msg_id"] for m in console.messages[len(first):] if "msg_id" in m]
    assert resent == list(range(1, len(resent) + 1))
    assert resent[-1] == console.exited()["msg_id"]


def test_a_reconnecting_agent_names_what_still_runs_in_its_hello(tmp_path):
    async def scenario():
        console = FakeConsole([make_placement(command="echo started; sleep 60")])
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)):
            await until(lambda: "started" in console.texts(), what="the command's first line")
            await console.connections[-1].close(code=1012, reason="service restart")
            await until(lambda: len(console.hellos) == 2, what="the second hello")
        return console

    console = asyncio.run(scenario())
    assert console.hellos[1]["running"] == [{"job_id": 7, "attempt": 1, "role": "master"}]
    assert console.states().count("running") == 1  # the same process, not a second start


def _spooled(agent):
    return [(msg_id, json.loads(text)) for msg_id, text in agent.spool.unsent(0)]


def test_backoff_doubles_from_half_a_second_to_ten_with_jitter():
    top = Backoff(rng=lambda: 1.0)
    assert [top.next() for _ in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    bottom = Backoff(rng=lambda: 0.0)
    assert [bottom.next() for _ in range(3)] == [0.25, 0.5, 1.0]  # jitter scales each delay to 50–100 %
    top.reset()
    assert top.next() == 0.5


def test_heartbeats_name_what_runs(tmp_path):
    async def scenario():
        console = FakeConsole([make_placement(command="sleep 60")])  # welcome asks for a beat every 0.5 s
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)):
            return await until(lambda: [m for m in console.of_type("heartbeat") if m["running"]], what="a heartbeat")

    before = time.time()
    [beat, *_] = asyncio.run(scenario())
    sent_at = beat.pop("sent_at")  # the agent's clock: the console measures how long beats wait in its queue
    assert beat == {"type": "heartbeat", "running": [{"job_id": 7, "attempt": 1, "role": "master"}]}
    assert before <= sent_at <= time.time()
