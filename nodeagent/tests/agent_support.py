"""Shared pieces of the node agent tests: a fake console, placements, an in-process agent.

The fake console is a real WebSocket server (websockets) on 127.0.0.1 speaking the protocol
of nodeagent/protocol.py, so the agent under test goes through its real connection code.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve

from nodeagent import protocol
from nodeagent.agent import Agent
from nodeagent.config import AgentConfig
from nodeagent.connection import Backoff
from nodeagent.gpus import SimulatedBackend
from nodeagent.runtimes.process import ProcessRuntime
from nodeagent.sandbox import SandboxSettings, why_unconfined


def make_placement(**overrides: Any) -> protocol.Placement:
    placement: dict[str, Any] = dict(
        job_id=7, job_name="demo-job", attempt=1, role="master", node_rank=0, nnodes=1, nproc_per_node=2,
        master_addr="127.0.0.1", master_port=29500, gpu_indices=[0, 1], command="true", script_url="",
        image="registry.example.com/team/train:1", registry=None, shm_size_gb=0, mount_path="",
        output_prefix="", resume_step=None, stop_grace_seconds=5.0, env={},
    )
    placement.update(overrides)
    return placement  # type: ignore[return-value]


def make_config(work_dir: Path, port: int, **overrides: Any) -> AgentConfig:
    values: dict[str, Any] = dict(
        console=f"http://127.0.0.1:{port}", token="good-token", name="test-node", gpus="simulated:2",
        server_type="g2", work_dir=work_dir, address="127.0.0.1", runtime="process", stop_grace=5.0,
    )
    values.update(overrides)
    return AgentConfig(**values)


class FakeConsole:
    """Records every agent message; answers hello with welcome + desired; acks unless told not to."""

    def __init__(self, placements: list[protocol.Placement] | None = None,
                 welcome_extra: dict[str, Any] | None = None) -> None:
        self.placements = list(placements or [])
        self.welcome_extra = dict(welcome_extra or {})  # e.g. what an older console also sent
        self.hellos: list[dict[str, Any]] = []
        self.messages: list[dict[str, Any]] = []  # logs/attempt/heartbeat, every connection, in arrival order
        self.connections: list[ServerConnection] = []
        self.server: Server | None = None
        self.ack = True
        self.batch_limit: int | None = None  # set: the welcome lets the agent batch its frames
        self.frame_sizes: list[int] = []  # messages in each frame after hello, every connection
        self.refuse_hellos = 0  # this many hellos (the next ones) are refused: the node is in use (4423)
        # called with (connection, message) after each message is recorded: scripted misbehaviour
        self.on_message: Callable[[ServerConnection, dict[str, Any]], Any] | None = None

    async def handler(self, ws: ServerConnection) -> None:
        self.connections.append(ws)
        hello = json.loads(await ws.recv())
        self.hellos.append(hello)
        if self.refuse_hellos:
            self.refuse_hellos -= 1
            await ws.send(json.dumps(protocol.Error(type="error", message="node 'test-node' is connected over another connection")))
            await ws.close(protocol.CLOSE_NODE_IN_USE)
            return
        welcome: dict[str, Any] = {
            **protocol.Welcome(type="welcome", node_id=1, heartbeat_interval=0.5, resume=f"secret-{len(self.hellos)}"),
            **self.welcome_extra,
        }
        if self.batch_limit is not None:
            welcome["batch_limit"] = self.batch_limit
        await ws.send(json.dumps(welcome))
        await ws.send(json.dumps(protocol.Desired(type="desired", placements=self.placements)))
        async for raw in ws:
            decoded = json.loads(raw)
            frame = decoded if isinstance(decoded, list) else [decoded]
            self.frame_sizes.append(len(frame))
            for message in frame:
                self.messages.append(message)
                if self.ack and "msg_id" in message:
                    await ws.send(json.dumps(protocol.Ack(type="ack", upto=message["msg_id"])))
                if self.on_message is not None:
                    await self.on_message(ws, message)

    def crash(self, ws: ServerConnection) -> None:
        """Stop listening and cut `ws` without a close frame, as a dying daphne would."""
        assert self.server is not None
        self.server.server.close()  # new connections are refused from now on
        ws.transport.abort()

    async def set_desired(self, placements: list[protocol.Placement]) -> None:
        self.placements = list(placements)
        await self.connections[-1].send(json.dumps(protocol.Desired(type="desired", placements=self.placements)))

    # -- what the agent said ---------------------------------------------------------------
    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m.get("type") == kind]

    def states(self) -> list[str]:
        return [m["state"] for m in self.of_type("attempt")]

    def exited(self) -> dict[str, Any] | None:
        return next((m for m in self.of_type("attempt") if m["state"] == "exited"), None)

    def lines(self, stream: str = "master") -> list[list[Any]]:
        """Every line once (a re-sent line is stored once, by seq), in seq order."""
        by_seq: dict[int, list[Any]] = {}
        for batch in self.of_type("logs"):
            if batch["stream"] == stream:
                for line in batch["lines"]:
                    by_seq.setdefault(line[0], line)
        return [by_seq[seq] for seq in sorted(by_seq)]

    def texts(self, stream: str = "master") -> list[str]:
        return [line[2] for line in self.lines(stream)]


@contextlib.asynccontextmanager
async def running_console(console: FakeConsole, port: int = 0) -> AsyncIterator[int]:
    async with serve(console.handler, "127.0.0.1", port) as server:
        console.server = server
        yield server.sockets[0].getsockname()[1]


def process_runtime(config: AgentConfig | None = None, **sandbox: Any) -> ProcessRuntime:
    """The process runtime as `python -m nodeagent` makes it: each placement in its own sandbox
    where the tests run as root (they do in CI), as the test's own user elsewhere. `sandbox`:
    more SandboxSettings (e.g. extra_device_rules)."""
    if os.geteuid() != 0 or (config is not None and config.no_isolation):
        return ProcessRuntime(real_gpus=False, unconfined=why_unconfined())
    settings = SandboxSettings(
        identities=config.identities if config else SandboxSettings().identities,
        file_storage_root=config.file_storage_root if config else None,
        readable=(config.env_cache,) if config and config.env_cache else (), node_name=config.name if config else "test-node",
        **sandbox,
    )
    return ProcessRuntime(real_gpus=False, sandbox=settings)


@contextlib.asynccontextmanager
async def running_agent(config: AgentConfig, runtime: ProcessRuntime | None = None) -> AsyncIterator[Agent]:
    """An agent in this event loop with simulated GPUs and the process runtime; stopped on exit."""
    runtime = runtime or process_runtime(config)
    agent = Agent(config, SimulatedBackend(config.name, 2, config.server_type), runtime)
    agent.connection.backoff = Backoff(initial=0.05, maximum=0.2)  # tests don't wait seconds to reconnect
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        yield agent
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=20)


async def until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
