"""The `run` half of the Slurm step launcher (nodeagent.slurm_step): one placement on this node,
run with the agent's own Runner, Supervisor and Connection. Imported only by `slurm_step run`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Collection, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from . import protocol
from .agent import AGENT_VERSION
from .checkpoints import CheckpointWatcher
from .config import agent_ws_url
from .connection import Connection
from .gpu_metrics import GpuReading
from .gpus import GpuBackend, GpuProbeError, open_backend
from .logstream import Outbox
from .metrics import MetricsCollector
from .protocol import GpuInfo
from .runner import RunnerContext
from .runtimes.process import ProcessRuntime
from .sandbox import CgroupSupport, SandboxSettings, unavailable
from .sandbox.files import private_directory
from .slurm_protocol import CONSOLE_ENV, STEP_PATH
from .slurm_step import EXIT_FAILED, _env
from .spool import Spool
from .storage import Storage, resolve_settings
from .supervisor import Supervisor

log = logging.getLogger("nodeagent.slurm_step")
START_TIMEOUT = 180.0  # seconds without a placement before the launcher gives up
DRAIN_SECONDS = 10.0


# -- run: one placement on this node -----------------------------------------------------------
def allocated_gpus(environ: Mapping[str, str]) -> list[int]:
    """The GPU indices Slurm gave this step on this node (SLURM_STEP_GPUS, else CUDA_VISIBLE_DEVICES)."""
    for name in ("SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"):
        words = [w.strip() for w in environ.get(name, "").split(",") if w.strip()]
        if words and all(w.isdigit() for w in words):
            return [int(w) for w in words]
    return []


def step_ws_url(console: str) -> str:
    return agent_ws_url(console).removesuffix(protocol.AGENT_PATH) + STEP_PATH


class RecordingOutbox(Outbox):
    """Remembers the exit report, for the launcher's own exit code."""

    exited: dict[str, Any] | None = None

    def attempt(self, placement: protocol.Placement, state: protocol.PlacementState, **fields: Any) -> None:
        super().attempt(placement, state, **fields)
        if state == "exited":
            self.exited = fields


class StepSupervisor(Supervisor):
    """The console names the GPUs by count; Slurm decided which ones this node's step got."""

    def __init__(self, ctx: RunnerContext, gpu_indices: list[int], grace: float) -> None:
        super().__init__(ctx)
        self.gpu_indices, self.grace = gpu_indices, grace
        self.told_to_stop = False

    def reconcile(self, placements: list[protocol.Placement]) -> None:
        local: list[protocol.Placement] = []
        for placement in placements:
            here: protocol.Placement = {
                **placement, "stop_grace_seconds": min(float(placement.get("stop_grace_seconds") or self.grace), self.grace),
            }
            if self.gpu_indices and len(self.gpu_indices) == len(placement.get("gpu_indices") or []):
                here["gpu_indices"] = self.gpu_indices
            local.append(here)
        if self.told_to_stop:
            local = []  # never start after Slurm said stop
        super().reconcile(local)

    def stop_all(self, reason: str) -> None:
        self.told_to_stop = True
        for runner in list(self.runners.values()):
            runner.request_stop(reason)

    @property
    def done(self) -> bool:
        return bool(self.finished) and not self.runners


def node_info(name: str, server_type: str, gpus: GpuBackend | None) -> protocol.NodeInfo:
    try:
        address = socket.gethostbyname(socket.gethostname())
    except OSError:
        address = "127.0.0.1"
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return protocol.NodeInfo(
        name=name, server_type=server_type, address=address, gpus=gpus.gpus() if gpus else [],
        cpus=os.cpu_count() or 1, memory_gb=round(pages / 2**30), runtime="process", agent_version=AGENT_VERSION,
    )


def open_gpus(spec: str, node: str, server_type: str, count: int) -> GpuBackend | None:
    """GPUs for the Monitoring tab: NVML (auto finds none without a driver), simulated, or none."""
    if spec == "off" or (spec == "simulated" and count <= 0):
        return None
    try:
        return open_backend("nvml" if spec == "auto" else f"simulated:{count}", node, server_type)
    except GpuProbeError as exc:
        log.warning("no GPU metrics: %s", exc)
        return None


def exit_code(report: dict[str, Any] | None, told_to_stop: bool) -> int:
    if report is None:
        return EXIT_FAILED
    if told_to_stop:
        return 0  # stopped as Slurm asked: the job's state (CANCELLED, PREEMPTED, TIMEOUT) tells why
    if report.get("exit_code") is not None:
        return int(report["exit_code"])
    return 128 + int(report["signal"]) if report.get("signal") else EXIT_FAILED


async def serve(args: argparse.Namespace, environ: MutableMapping[str, str], token: str) -> int:
    console, node = _env(environ, CONSOLE_ENV), _env(environ, "SLURMD_NODENAME")
    run_dir = Path(args.work_dir) / f"slurm-{_env(environ, 'SLURM_JOB_ID')}" / f"restart-{environ.get('SLURM_RESTART_COUNT') or 0}" / node
    private_directory(run_dir)  # the spool and markers: the launcher's alone
    indices = allocated_gpus(environ)
    gpus = open_gpus(args.gpus, node, args.server_type, len(indices))
    spool = Spool(run_dir / "spool")
    outbox = RecordingOutbox(spool)

    warming = Warming()

    def storage(placement: protocol.Placement) -> Storage | None:
        warming.join()  # one thread builds boto3's default session at a time
        settings = resolve_settings(environ, placement)  # the placement's own credentials
        return Storage(settings) if settings else None

    ctx = RunnerContext(node_name=node, work_dir=run_dir, runtime=step_runtime(node), outbox=outbox,
                        storage=storage, default_grace=args.grace)
    supervisor = StepSupervisor(ctx, indices, args.grace)
    connection = Connection(step_ws_url(console), token, node_info(node, args.server_type, gpus), spool, supervisor)
    checkpoints = CheckpointWatcher(lambda: list(supervisor.runners.values()), outbox)
    ctx.after_command = checkpoints.poll_one
    tasks = [asyncio.create_task(connection.run()), asyncio.create_task(checkpoints.run())]
    if gpus is not None or args.metrics_interval > 0:
        tasks.append(asyncio.create_task(MetricsCollector(gpus or _NoGpus(), supervisor, outbox, args.metrics_interval, run_dir).run()))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, supervisor.stop_all, f"Slurm is stopping this job step ({signal.Signals(sig).name})")
    started = loop.time()
    while not supervisor.done:
        if any(runner.state == "running" for runner in supervisor.runners.values()):
            warming.start()  # not before: boto3's import would slow the start of the command down
        if tasks[0].done():
            break  # the token was refused: Connection.run raised
        waiting = not supervisor.runners and not supervisor.finished
        if waiting and (supervisor.told_to_stop or loop.time() - started > START_TIMEOUT):
            break
        await asyncio.sleep(0.1)
    if not await connection.drain(DRAIN_SECONDS):
        log.warning("%d message(s) not acknowledged by the console; they stay in %s", len(spool), spool.directory)
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    spool.close()
    if gpus is not None:
        gpus.close()
    refused = results[0]
    if isinstance(refused, Exception) and not isinstance(refused, asyncio.CancelledError):
        print(f"slurm_step: the console refused this node: {refused}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    if not supervisor.finished:
        print(f"slurm_step: the console assigned nothing to node {node} within {START_TIMEOUT:.0f} s", file=sys.stderr, flush=True)
        return 0 if supervisor.told_to_stop else EXIT_FAILED
    return exit_code(outbox.exited, supervisor.told_to_stop)


class Warming:
    """boto3 imported and its S3 model loaded in a thread, once the command runs.

    A launcher is a fresh process for every run: paid when the command has ended (the checkpoint
    check and the OUTPUT_DIR upload need a client), this cost seconds between the command's exit
    and its report, which the agents, long-running processes, pay once. Started while the
    launcher connects, it held the GIL and CPU the command's start needed; a placement that needs
    storage before its command (its script, project, inputs) builds its client itself."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=warm_storage, name="warm-storage", daemon=True)
            self.thread.start()

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()


def warm_storage() -> None:
    """Import boto3 and load its S3 model into the default session (a failure only means the
    first real client pays it)."""
    with contextlib.suppress(Exception):
        import boto3

        boto3.client("s3", endpoint_url="http://127.0.0.1:9", aws_access_key_id="warm-up",
                     aws_secret_access_key="warm-up", region_name="us-east-1")


def step_runtime(node: str) -> ProcessRuntime:
    """The agent's own process runtime. Run as root by slurmd, each step gets the agent's sandbox
    (its own Unix user from the job-user range, its tenant's group, its own namespaces), so the
    steps of different tenants never share an identity or a writable directory; Slurm's cgroup
    (task/cgroup, proctrack/cgroup) stays the step's: the sandbox makes none of its own, which
    would take the step out of Slurm's tracking. Run as the Slurm job's user, the step is as
    isolated as Slurm makes that user. Slurm's own variables (SLURM_JOB_ID, SLURMD_NODENAME, ...)
    are passed on: they tell a step's processes apart on a shared machine."""
    runtime = ProcessRuntime(real_gpus=False, unconfined="Slurm runs this step as its job's user, not as root")
    if not unavailable():
        runtime = ProcessRuntime(real_gpus=False, sandbox=SandboxSettings(
            node_name=node, cgroups=CgroupSupport(0, note="the step stays in the cgroup Slurm gave it"),
        ))
    runtime.pass_env = ("SLURM*",)  # SLURM_JOB_ID, SLURMD_NODENAME, ...: what a step's processes carry under Slurm
    return runtime


class _NoGpus:
    """Node metrics only (no GPU backend on this node)."""

    real = False

    def gpus(self) -> list[GpuInfo]:
        return []

    def sample(self, busy: Collection[int], loads: object = None) -> dict[int, GpuReading]:
        return {}

    def close(self) -> None:
        pass
