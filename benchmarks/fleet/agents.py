"""The simulated fleet: agents that speak the real protocol (nodeagent.connection.Connection and
nodeagent.spool.Spool, unchanged) and "run" placements as timers, spread over processes of their
own; what they measure (message → ack, a GPU's idle gaps, their own event loops' lag)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import re
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks._stack import percentile
from nodeagent import protocol
from nodeagent.connection import Connection
from nodeagent.logstream import Outbox
from nodeagent.spool import Spool


class TimedSpool(Spool):
    """A spool that notes when each message first went out and when its ack came back (and
    skips fsync: a thousand agents share this one disk)."""

    acks: list[float] = []  # message → ack latencies of every agent, seconds
    acks_by_kind: dict[str, list[float]] = {}  # the same, by message type (attempt reports by state)

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.sent_at: dict[int, tuple[float, str]] = {}

    def sync(self) -> None:
        self._file.flush()

    def unsent(self, after: int):
        batch = super().unsent(after)
        now = time.monotonic()
        for msg_id, text in batch:
            if msg_id not in self.sent_at:
                kind = re.search(r'"type":"(\w+)"', text)
                state = re.search(r'"state":"(\w+)"', text)
                self.sent_at[msg_id] = (now, (kind.group(1) if kind else "?") + (f" {state.group(1)}" if state else ""))
        return batch

    def ack(self, upto: int) -> None:
        now = time.monotonic()
        for msg_id in [m for m in self.sent_at if m <= upto]:
            sent, kind = self.sent_at.pop(msg_id)
            TimedSpool.acks.append(now - sent)
            TimedSpool.acks_by_kind.setdefault(kind, []).append(now - sent)
        super().ack(upto)

    @classmethod
    def clear(cls) -> None:
        cls.acks.clear()
        cls.acks_by_kind.clear()


class SimSupervisor:
    """Runs desired placements as timers: preparing, running, two lines, exit 0 after the sleep."""

    running_gpus = 0  # of this process's agents: GPUs whose command runs now (started, not yet exited)
    shared: Any = None  # the fleet's array of those counts, one slot per process (Fleet reads it)
    slot = 0
    seen_at: dict[tuple[int, int], float] = {}  # (job, attempt) → when its desired state reached an agent (epoch s)
    idle_gaps: list[float] = []  # a GPU's seconds between a command's exit and the next command's start

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.tasks: dict[str, asyncio.Task] = {}
        self.finished: set[str] = set()
        self.freed_at: dict[int, float] = {}  # GPU index → when its last command exited (monotonic)

    @classmethod
    def count_running(cls, change: int) -> None:
        cls.running_gpus += change
        if cls.shared is not None:
            cls.shared[cls.slot] = cls.running_gpus

    def running(self) -> list[protocol.RunningRef]:
        return [protocol.RunningRef(job_id=int(k.split("/")[0]), attempt=int(k.split("/")[1]), role=k.split("/")[2])
                for k in self.tasks]

    def ended(self) -> list[protocol.RunningRef]:
        return []

    def reconcile(self, placements: list[protocol.Placement]) -> None:
        wanted = {protocol.placement_key(p["job_id"], p["attempt"], p["role"]): p for p in placements}
        for key, placement in wanted.items():
            SimSupervisor.seen_at.setdefault((placement["job_id"], placement["attempt"]), time.time())
            if key not in self.tasks and key not in self.finished:
                self.tasks[key] = asyncio.get_running_loop().create_task(self._run(key, placement))
        for key in [k for k in self.tasks if k not in wanted]:
            self.tasks.pop(key).cancel()

    async def _run(self, key: str, placement: protocol.Placement) -> None:
        seconds = float(m.group(1)) if (m := re.search(r"sleep (\d+(?:\.\d+)?)", placement["command"])) else 1.0
        try:
            self.outbox.attempt(placement, "preparing")
            self.outbox.attempt(placement, "running")
            started = time.time()
            for gpu in placement["gpu_indices"]:
                if gpu in self.freed_at:
                    SimSupervisor.idle_gaps.append(time.monotonic() - self.freed_at.pop(gpu))
            self.outbox.logs(placement["job_id"], placement["attempt"], placement["role"],
                             [[1, started, f"[INFO] Starting the command: {placement['command']}"], [2, started, "training"]])
            SimSupervisor.count_running(len(placement["gpu_indices"]))
            try:
                await asyncio.sleep(seconds)
            finally:
                SimSupervisor.count_running(-len(placement["gpu_indices"]))
                self.freed_at.update(dict.fromkeys(placement["gpu_indices"], time.monotonic()))
            self.outbox.attempt(placement, "exited", exit_code=0)
        except asyncio.CancelledError:
            self.outbox.attempt(placement, "exited", signal=15)
            raise
        finally:
            self.finished.add(key)
            self.tasks.pop(key, None)


class SimAgent:
    def __init__(self, name: str, token: str, url: str, work: Path) -> None:
        self.name = name
        self.spool = TimedSpool(work / name)
        self.supervisor = SimSupervisor(Outbox(self.spool))
        node = protocol.NodeInfo(
            name=name, server_type="g2", address="127.0.0.1", cpus=96, memory_gb=2048, runtime="process",
            agent_version="fleet-sim",
            gpus=[protocol.GpuInfo(index=i, uuid=f"{name}-{i}", model="H100", memory_gb=80) for i in range(8)],
        )
        self.connection = Connection(url, token, node, self.spool, self.supervisor, on_welcome=self._welcomed)  # type: ignore[arg-type]
        self.opened = 0.0
        self.welcome_seconds: float | None = None
        self.task: asyncio.Task | None = None

    def _welcomed(self, welcome) -> None:
        if self.welcome_seconds is None:
            self.welcome_seconds = time.monotonic() - self.opened

    def start(self) -> None:
        self.opened = time.monotonic()
        self.task = asyncio.get_running_loop().create_task(self.connection.run())

    def kill(self) -> None:
        """As a node that loses power: its socket goes, nothing more is sent."""
        for task in self.supervisor.tasks.values():
            task.cancel()
        if self.task:
            self.task.cancel()


class Fleet:
    """The simulated agents, spread over `processes` processes, each with its own event loop.
    Real nodes do not share one: with a thousand agents on one loop, a start wave's desired
    states, spool writes and frames queued the console's acks behind the simulator's own work
    (0.1-0.5 s of the measured message→ack). Commands go to every process over a pipe, one at
    a time; GPUs running a command are read from a shared array without asking."""

    def __init__(self, processes: int, names: list[str], tokens: dict[str, str], urls: list[str], work: Path) -> None:
        context = multiprocessing.get_context("spawn")  # this process has threads and a Redis client
        self.running = context.Array("q", processes, lock=False)
        self.lock = threading.Lock()
        self.pipes, self.processes = [], []
        for slot in range(processes):
            mine = [(name, tokens[name], urls[i % len(urls)]) for i, name in enumerate(names) if i % processes == slot]
            parent, child = context.Pipe()
            process = context.Process(target=fleet_process, args=(child, slot, processes, self.running, mine, str(work)),
                                      daemon=True, name=f"fleet-{slot}")
            process.start()
            self.pipes.append(parent)
            self.processes.append(process)

    def ask(self, command: str, *args: Any) -> list[Any]:
        """Every process's answer to `command`, in slot order."""
        with self.lock:
            for pipe in self.pipes:
                pipe.send((command, args))
            return [pipe.recv() for pipe in self.pipes]

    def running_gpus(self) -> int:
        return sum(self.running)

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.pid is not None]

    def stop(self) -> None:
        with contextlib.suppress(OSError, EOFError):
            self.ask("stop")
        for process in self.processes:
            process.join(timeout=10)


def fleet_process(pipe, slot: int, processes: int, running, agents: list[tuple[str, str, str]], work: str) -> None:
    asyncio.run(serve_agents(pipe, slot, processes, running, agents, Path(work)))


async def serve_agents(pipe, slot: int, processes: int, running, specs: list[tuple[str, str, str]], work: Path) -> None:
    """One process of the fleet: its agents, and the answers to the Fleet's commands."""
    SimSupervisor.shared, SimSupervisor.slot = running, slot
    loop = asyncio.get_running_loop()
    agents = [SimAgent(name, token, url, work) for name, token, url in specs]
    lags: list[tuple[float, float]] = []  # (when, how late) this process's event loop woke up

    async def own_lag_forever() -> None:
        while True:
            began = time.monotonic()
            await asyncio.sleep(0.05)
            lags.append((began, time.monotonic() - began - 0.05))

    async def connect(rate: float) -> None:
        # the whole fleet connects at `rate` in name order: this process's i-th agent is the
        # fleet's (i * processes + slot)-th
        began = time.monotonic()
        for i, agent in enumerate(agents):
            await asyncio.sleep(max(0.0, began + (i * processes + slot) / rate - time.monotonic()))
            agent.start()

    tasks = {loop.create_task(own_lag_forever())}
    while True:
        command, args = await loop.run_in_executor(None, pipe.recv)
        answer: Any = None
        if command == "connect":
            tasks.add(loop.create_task(connect(*args)))
        elif command == "welcomed":
            answer = [a.welcome_seconds for a in agents if a.welcome_seconds is not None]
        elif command == "clear":  # from now on: acks, idle gaps (a cordoned queue's wait is not one)
            TimedSpool.clear()
            SimSupervisor.idle_gaps.clear()
            for agent in agents:
                agent.supervisor.freed_at.clear()
        elif command == "stats":
            since = args[0]
            answer = {"acks": TimedSpool.acks, "by_kind": TimedSpool.acks_by_kind, "gaps": SimSupervisor.idle_gaps,
                      "seen_at": SimSupervisor.seen_at, "lags": [lag for at, lag in lags if at >= since]}
        elif command == "kill":
            answer = {}
            for agent in agents:
                if agent.name in args[0]:
                    agent.kill()
                    answer[agent.name] = time.time()
        elif command == "stop":
            for agent in agents:
                agent.kill()
            await asyncio.sleep(0.5)
            pipe.send(None)
            return
        pipe.send(answer)


class FleetStats:
    """What the fleet's processes measured since a `clear`, put together."""

    def __init__(self, answers: list[dict]) -> None:
        self.acks = [a for answer in answers for a in answer["acks"]]
        self.by_kind: dict[str, list[float]] = {}
        for answer in answers:
            for kind, times in answer["by_kind"].items():
                self.by_kind.setdefault(kind, []).extend(times)
        self.gaps = [g for answer in answers for g in answer["gaps"]]
        self.seen_at = {k: v for answer in answers for k, v in answer["seen_at"].items()}
        self.lags = [lag for answer in answers for lag in answer["lags"]]

    def kinds(self) -> str:
        return "; ".join(f"{kind} p50 {percentile(times, 50):.3f} s, p99 {percentile(times, 99):.3f} s"
                         for kind, times in sorted(self.by_kind.items()))
