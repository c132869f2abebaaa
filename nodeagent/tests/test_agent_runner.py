"""The agent against a fake console: a placement runs, its lines and exit reach the console."""

from __future__ import annotations

import asyncio
import signal
import time

from nodeagent.tests.agent_support import (
    FakeConsole,
    make_config,
    make_placement,
    running_agent,
    running_console,
    until,
)

COMMAND = "echo hello; echo oops >&2; exit 3"


def test_it_runs_a_placement_and_reports_lines_and_exit_code(tmp_path):
    async def scenario():
        console = FakeConsole([make_placement(command=COMMAND)])
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)) as agent:
            await until(console.exited, what="the exited report")
            await until(lambda: not len(agent.spool), what="everything acked")
        return console

    console = asyncio.run(scenario())
    hello = console.hellos[0]
    assert hello["type"] == "hello" and hello["protocol"] == 1 and hello["running"] == []
    assert hello["node"]["name"] == "test-node" and hello["node"]["runtime"] == "process"
    assert [g["model"] for g in hello["node"]["gpus"]] == ["NVIDIA H100 SXM"] * 2
    assert hello["node"]["gpus"][1]["uuid"] == "GPU-sim-test-node-1"

    texts = console.texts()
    assert texts[:2] == [
        "[INFO] Preparing the training environment on node test-node (attempt 1, role master)",
        "[INFO] Image registry.example.com/team/train:1: not used by the process runtime (the command runs on the node)",
    ]
    # no container here, so no "sidecar container is running" (the docker runtime's words)
    ready = next(t for t in texts if t.startswith("[INFO] Environment ready ("))
    assert ready.endswith("s); the command runs as a process on this node (no container)") and "sidecar" not in ready
    start = texts.index(f"[INFO] Starting the command: {COMMAND}")
    assert texts[start + 1].startswith("[INFO] Isolation: ")  # what the command can reach (test_agent_sandbox)
    assert sorted(texts[start + 2:start + 4]) == ["hello", "oops"]  # stdout and stderr, one stream
    assert texts[start + 4] == "[INFO] Command exited with code 3"

    lines = console.lines()
    assert [line[0] for line in lines] == list(range(1, len(lines) + 1))  # seq from 1, no gaps
    assert all(a[1] <= b[1] for a, b in zip(lines, lines[1:], strict=False))  # timestamps in order
    assert all(b["job_id"] == 7 and b["attempt"] == 1 for b in console.of_type("logs"))

    assert console.states() == ["preparing", "running", "exited"]
    exited = console.exited()
    assert exited["exit_code"] == 3 and exited["signal"] is None and exited["role"] == "master"
    # the exit report comes after every line of the attempt
    assert exited["msg_id"] > max(b["msg_id"] for b in console.of_type("logs"))
    ids = [m["msg_id"] for m in console.messages if "msg_id" in m]
    assert ids == list(range(1, len(ids) + 1))


def test_it_stops_a_placement_that_is_no_longer_desired(tmp_path):
    async def scenario():
        placement = make_placement(command="echo started; sleep 60", stop_grace_seconds=5.0)
        console = FakeConsole([placement])
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)) as agent:
            await until(lambda: "started" in console.texts(), what="the command's first line")
            assert agent.supervisor.running() == [{"job_id": 7, "attempt": 1, "role": "master"}]
            began = time.monotonic()
            await console.set_desired([])
            await until(console.exited, what="the exited report")
            elapsed = time.monotonic() - began
            # listed again after it exited: an attempt never runs twice on a node
            await console.set_desired([placement])
            await asyncio.sleep(0.3)
            assert agent.supervisor.running() == []
        return console, elapsed

    console, elapsed = asyncio.run(scenario())
    exited = console.exited()
    assert exited["signal"] == signal.SIGTERM and exited["exit_code"] is None
    assert "no longer assigns it" in exited["message"]
    assert elapsed < 5.0  # sleep dies on SIGTERM, well within the grace
    texts = console.texts()
    assert "[INFO] Command killed by signal SIGTERM" in texts
    assert any(t.startswith("[INFO] Stopping the command (the console no longer assigns it") for t in texts)
    assert console.states() == ["preparing", "running", "exited"]


def test_it_kills_a_command_that_ignores_sigterm_after_the_grace(tmp_path):
    async def scenario():
        placement = make_placement(command="trap '' TERM; echo started; sleep 60", stop_grace_seconds=0.5)
        console = FakeConsole([placement])
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)):
            await until(lambda: "started" in console.texts(), what="the command's first line")
            await console.set_desired([])
            await until(console.exited, what="the exited report")
        return console

    console = asyncio.run(scenario())
    assert console.exited()["signal"] == signal.SIGKILL
    assert "[INFO] Command killed by signal SIGKILL" in console.texts()


def test_it_gives_the_training_process_the_environment_contract(tmp_path, monkeypatch):
    monkeypatch.setenv("NODEAGENT_TOKEN", "agent-secret")  # the agent's own secret stays with the agent
    command = 'echo "rank=$PET_NODE_RANK nnodes=$PET_NNODES job=$JOB_NAME attempt=$JOB_ATTEMPT cwd=$(pwd) out=$OUTPUT_DIR token=${NODEAGENT_TOKEN:-none}"'

    async def scenario():
        console = FakeConsole([make_placement(command=command, attempt=2, role="master")])
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)):
            await until(console.exited, what="the exited report")
        return console

    console = asyncio.run(scenario())
    workdir = tmp_path / "jobs" / "7" / "attempt-2" / "master"
    assert f"rank=0 nnodes=1 job=demo-job attempt=2 cwd={workdir} out={workdir / 'output'} token=none" in console.texts()
    assert console.exited()["exit_code"] == 0


def test_only_the_container_runtime_speaks_of_a_sidecar_container():
    from nodeagent.runtimes.docker import DockerRuntime
    from nodeagent.runtimes.process import ProcessRuntime

    assert DockerRuntime.ready_words == "sidecar container is running and ready for training process to run!"
    assert "container is running" not in ProcessRuntime.ready_words
