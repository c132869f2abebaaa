"""The agent's side of "one connection per node": it proves a reconnect is its own with the
welcome's resume secret, and a refusal because the node is in use is retried, not fatal."""

from __future__ import annotations

import asyncio
import logging

from nodeagent.tests.agent_support import (
    FakeConsole,
    make_config,
    make_placement,
    running_agent,
    running_console,
    until,
)


def test_a_reconnecting_agent_presents_the_resume_secret_of_its_last_welcome(tmp_path):
    async def scenario():
        console = FakeConsole([make_placement(command="echo started; sleep 60")])
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)):
            await until(lambda: "started" in console.texts(), what="the command's first line")
            await console.connections[-1].close(code=1012, reason="service restart")
            await until(lambda: len(console.hellos) == 2, what="the second hello")
            await console.connections[-1].close(code=1012, reason="service restart")
            await until(lambda: len(console.hellos) == 3, what="the third hello")
        return console

    console = asyncio.run(scenario())
    assert "resume" not in console.hellos[0]  # a new process has none
    assert [hello["resume"] for hello in console.hellos[1:]] == ["secret-1", "secret-2"]  # each welcome's, in turn


def test_an_agent_refused_because_its_node_is_in_use_says_so_and_keeps_trying(tmp_path, caplog):
    async def scenario():
        console = FakeConsole([make_placement(command="echo started")])
        console.refuse_hellos = 3
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)) as agent:
            await until(lambda: "[INFO] Command exited with code 0" in console.texts(), what="the job to run once let in")
            return console, agent.connection.resume

    with caplog.at_level(logging.INFO, logger="nodeagent.connection"):
        console, resume = asyncio.run(scenario())
    assert len(console.hellos) == 4 and resume == "secret-4"
    refusals = [r.getMessage() for r in caplog.records if "held by another live connection" in r.getMessage()]
    assert len(refusals) == 3
    assert "node 'test-node' is connected over another connection" in caplog.text  # the console's words
