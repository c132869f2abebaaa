"""Wiring: probe the GPUs, open the spool, recover, connect, and shut down cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from typing import Any

from . import protocol
from .checkpoints import CheckpointWatcher
from .config import AgentConfig, default_env_cache
from .connection import Connection, Superseded, TokenRejected
from .envcache import EnvironmentCache
from .faults import FaultMonitor, InvalidFault
from .gpus import GpuBackend
from .logstream import Outbox
from .metrics import MetricsCollector
from .runner import RunnerContext
from .runtimes import Runtime
from .sandbox.files import private_directory
from .spool import Spool
from .storage import Storage, resolve_settings
from .supervisor import Supervisor

AGENT_VERSION = "0.1.0"
EXIT_TOKEN_REFUSED = 2
EXIT_SUPERSEDED = 3  # another agent process connected with this node's token
DRAIN_SECONDS = 5.0  # at shutdown, time for the console to acknowledge the last exit reports
FENCE_GRACE_SECONDS = 3.0  # a fenced node has little time left before the console moves its work

log = logging.getLogger("nodeagent")


def node_info(config: AgentConfig, gpus: GpuBackend) -> protocol.NodeInfo:
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return protocol.NodeInfo(
        name=config.name, server_type=config.server_type, address=config.address, gpus=gpus.gpus(),
        cpus=os.cpu_count() or 1, memory_gb=round(pages / 2**30), runtime=config.runtime, agent_version=AGENT_VERSION,
    )


class Agent:
    def __init__(self, config: AgentConfig, gpus: GpuBackend, runtime: Runtime) -> None:
        self.config, self.gpus = config, gpus
        private_directory(config.work_dir)  # the spool, the markers, the warm pool: root's alone
        self.spool = Spool(config.work_dir / "spool")
        self.ctx = RunnerContext(
            node_name=config.name, work_dir=config.work_dir, runtime=runtime, outbox=Outbox(self.spool),
            storage=self._storage, default_grace=config.stop_grace,
            environments=EnvironmentCache(config.env_cache or default_env_cache(), cpu_node=not runtime.real_gpus),
            cache_cap=int(config.cache_max_gb * 1e9) if config.cache_max_gb is not None else None,
        )
        self.supervisor = Supervisor(self.ctx)
        self.metrics = MetricsCollector(gpus, self.supervisor, self.ctx.outbox, config.metrics_interval, config.work_dir)
        self.connection = Connection(
            config.ws_url, config.token, node_info(config, gpus), self.spool, self.supervisor, on_welcome=self._welcome,
            on_inject=self._inject,
        )
        self.faults = FaultMonitor(gpus, emit=self.ctx.outbox.fault, crash=self.supervisor.crash_gpu)
        self.checkpoints = CheckpointWatcher(lambda: list(self.supervisor.runners.values()), self.ctx.outbox)
        self.ctx.after_command = self.checkpoints.poll_one
        self.fence_after = protocol.DEFAULT_FENCE_AFTER
        self.fenced = False

    def _welcome(self, welcome: protocol.Welcome) -> None:
        self.fence_after = float(welcome.get("fence_after_seconds") or protocol.DEFAULT_FENCE_AFTER)
        self.fenced = False

    def _inject(self, message: protocol.InjectFault) -> None:
        try:
            event = self.faults.inject(message.get("kind", ""), message.get("gpu_index"), message.get("xid"), message.get("detail", ""))
            log.warning("injected fault: %s", event)
        except InvalidFault as exc:
            log.error("fault injection refused: %s", exc)

    async def _fence_when_cut_off(self) -> None:
        """Stop this node's placements before the console can declare it Lost and move them."""
        loop = asyncio.get_running_loop()
        self.connection.last_contact = loop.time()
        while True:
            await asyncio.sleep(0.5)
            silent = loop.time() - self.connection.last_contact
            if self.connection.connected.is_set() or self.fenced or silent < self.fence_after:
                continue
            self.fenced = True
            stopped = self.supervisor.fence(f"cut off from the console for {silent:.0f} s (fencing)", FENCE_GRACE_SECONDS)
            if stopped:
                log.warning("cut off from the console for %.0f s: stopped %d placement(s)", silent, stopped)

    async def _recover(self) -> None:
        """What an earlier agent process left: marked placements first (stopped with their
        grace, reported), then the runtime's unmarked leftovers (e.g. its containers)."""
        await self.supervisor.recover()
        try:
            removed = await self.ctx.runtime.remove_strays(self.config.stop_grace)
        except Exception:  # a failed sweep must not keep the agent from serving
            log.exception("could not remove what an earlier agent process left")
            return
        if removed:
            log.warning("removed %d container(s) left by an earlier agent process: %s", len(removed), ", ".join(removed))

    def _storage(self, placement: protocol.Placement) -> Storage | None:
        settings = resolve_settings(os.environ, placement)
        return Storage(settings) if settings else None

    async def run(self, stop: asyncio.Event | None = None) -> int:
        """Serve until `stop` is set (SIGTERM/SIGINT) or the token is refused; returns the exit code."""
        stop = stop or asyncio.Event()
        recovery = asyncio.create_task(self._recover())
        connection = asyncio.create_task(self.connection.run())
        helpers = [asyncio.create_task(coro) for coro in (self.faults.run(), self.checkpoints.run(), self._fence_when_cut_off())]
        helpers.append(asyncio.create_task(self.metrics.run()))  # GPU and node samples, spooled like logs
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({connection, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        code = 0
        if connection.done():
            exc = connection.exception()
            if isinstance(exc, Superseded):
                # the jobs are stopped below: the agent that replaced this one runs them now
                print(f"{exc}: stopping this agent's jobs and exiting.", file=sys.stderr, flush=True)
                code = EXIT_SUPERSEDED
            elif isinstance(exc, TokenRejected):
                print(
                    f"the console refused this node's token: {exc}. "
                    f"Mint a token with `python manage.py nodetoken {self.config.name}`.",
                    file=sys.stderr, flush=True,
                )
                code = EXIT_TOKEN_REFUSED
            else:
                raise exc or RuntimeError("the connection loop ended")
        if code == 0:
            # a clean exit: the console moves this node's jobs on now, not after the grace
            await self.connection.goodbye("the node agent is shutting down")
        # stop what runs (nothing may be left orphaned), then give the exit reports a chance
        # to reach the console; what does not is re-sent from the spool by the next agent
        await recovery
        for helper in helpers:
            helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        await self.supervisor.shutdown()
        if not connection.done():
            await self.connection.drain(DRAIN_SECONDS)
            connection.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await connection
        self.spool.close()
        self.gpus.close()
        return code


async def serve(config: AgentConfig, gpus: GpuBackend, runtime: Runtime) -> int:
    agent = Agent(config, gpus, runtime)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _on_signal, stop, sig)
    return await agent.run(stop)


def _on_signal(stop: asyncio.Event, sig: Any) -> None:
    log.info("received %s: stopping the placements and exiting", signal.Signals(sig).name)
    stop.set()
