"""The node-side step launcher of a Training Job that runs under Slurm (no Django).

The batch script (jobs.slurm.batch_script) calls it twice:

    python -m nodeagent.slurm_step token     # batch step: the launch key → this run's token
    srun … python -m nodeagent.slurm_step run --work-dir DIR --grace S --gpus auto --server-type g2

`run` is one task on every allocated node. It is a node agent for exactly one placement: it
connects to the console with the run's token (nodeagent.slurm_protocol), receives its
placement (role, rank, MASTER_ADDR of the allocation's first host, CKPT_LAST_STEP, …) and runs it
with the agent's own Runner (script download, environment contract, command, OUTPUT_DIR upload),
shipping log lines, metrics and checkpoint commits through the same spool. SIGTERM from Slurm
(cancel, preemption, time limit) or from srun (another rank failed) stops the command with the
grace period; the launcher then drains its spool and exits: with the command's exit code, or 0
when it stopped because it was told to (the Slurm job's state says why).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Mapping, MutableMapping, Sequence
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
from .slurm_protocol import CONSOLE_ENV, JOB_ENV, LAUNCH_KEY_ENV, REDEEM_PATH, STEP_PATH, TOKEN_ENV
from .spool import Spool
from .storage import Storage, resolve_settings
from .supervisor import Supervisor

log = logging.getLogger("nodeagent.slurm_step")
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
REDEEM_DELAYS = (0.5, 1, 2, 4, 8, 10)  # seconds between tries: the console may be restarting
START_TIMEOUT = 180.0  # seconds without a placement before the launcher gives up
DRAIN_SECONDS = 10.0
EXIT_FAILED = 1


class UsageError(Exception):
    pass


def _env(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name, "").strip()
    if not value:
        raise UsageError(f"{name} is not set: this command runs inside a Slurm job the console submitted")
    return value


# -- token: the batch step redeems the job's launch key ---------------------------------------
def redeem(environ: Mapping[str, str], delays: Sequence[float] = REDEEM_DELAYS) -> str:
    """POST the run's identity with the launch key; returns this run's token (retries transient errors)."""
    console = _env(environ, CONSOLE_ENV).rstrip("/")
    body = json.dumps({
        "job_id": int(_env(environ, JOB_ENV)), "slurm_job_id": int(_env(environ, "SLURM_JOB_ID")),
        "restart_count": int(environ.get("SLURM_RESTART_COUNT") or 0), "nodelist": _env(environ, "SLURM_JOB_NODELIST"),
    }).encode()
    key = _env(environ, LAUNCH_KEY_ENV)
    for attempt, delay in enumerate((*delays, None)):
        request = urllib.request.Request(console + REDEEM_PATH, data=body, method="POST", headers={
            "Authorization": f"Bearer {key}", "Content-Type": "application/json",
        })
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                return str(json.loads(response.read())["token"])
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", errors="replace")[:500]
            if exc.code < 500:  # refused: retrying cannot help
                raise UsageError(f"the console refused this run (HTTP {exc.code}): {detail}") from exc
            problem = f"HTTP {exc.code}: {detail}"
        except (OSError, ValueError, KeyError) as exc:
            problem = str(exc)
        if delay is None:
            raise UsageError(f"the console at {console} did not answer after {attempt + 1} tries: {problem}")
        print(f"slurm_step: the console is not answering ({problem}); retrying in {delay} s", file=sys.stderr, flush=True)
        time.sleep(delay)
    raise AssertionError("unreachable")


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


async def serve(args: argparse.Namespace, environ: MutableMapping[str, str]) -> int:
    token = environ.pop(TOKEN_ENV, "")
    if not token:
        raise UsageError(f"{TOKEN_ENV} is not set: run `slurm_step token` in the batch step first")
    console, node = _env(environ, CONSOLE_ENV), _env(environ, "SLURMD_NODENAME")
    run_dir = Path(args.work_dir) / f"slurm-{_env(environ, 'SLURM_JOB_ID')}" / f"restart-{environ.get('SLURM_RESTART_COUNT') or 0}" / node
    run_dir.mkdir(parents=True, exist_ok=True)
    indices = allocated_gpus(environ)
    gpus = open_gpus(args.gpus, node, args.server_type, len(indices))
    spool = Spool(run_dir / "spool")
    outbox = RecordingOutbox(spool)
    welcome: dict[str, Any] = {}

    def storage() -> Storage | None:
        settings = resolve_settings(environ, welcome.get("object_storage"))
        return Storage(settings) if settings else None

    ctx = RunnerContext(node_name=node, work_dir=run_dir, runtime=ProcessRuntime(real_gpus=False), outbox=outbox,
                        storage=storage, default_grace=args.grace)
    supervisor = StepSupervisor(ctx, indices, args.grace)
    connection = Connection(step_ws_url(console), token, node_info(node, args.server_type, gpus), spool, supervisor,
                            on_welcome=welcome.update)
    checkpoints = CheckpointWatcher(lambda: list(supervisor.runners.values()), outbox, storage)
    ctx.after_command = checkpoints.poll_one
    tasks = [asyncio.create_task(connection.run()), asyncio.create_task(checkpoints.run())]
    if gpus is not None or args.metrics_interval > 0:
        tasks.append(asyncio.create_task(MetricsCollector(gpus or _NoGpus(), supervisor, outbox, args.metrics_interval, run_dir).run()))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, supervisor.stop_all, f"Slurm is stopping this job step ({signal.Signals(sig).name})")
    started = loop.time()
    while not supervisor.done:
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


class _NoGpus:
    """Node metrics only (no GPU backend on this node)."""

    real = False

    def gpus(self) -> list[GpuInfo]:
        return []

    def sample(self, busy: Collection[int]) -> dict[int, GpuReading]:
        return {}

    def close(self) -> None:
        pass


def _without_own_path(environ: dict[str, str]) -> dict[str, str]:
    """The launcher may be started with PYTHONPATH pointing at this package: the user's command should not inherit it."""
    parts = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != PACKAGE_ROOT]
    result = dict(environ)
    if parts:
        result["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        result.pop("PYTHONPATH", None)
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m nodeagent.slurm_step", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("token", help="redeem the job's launch key for this run's token (prints it)")
    run = commands.add_parser("run", help="run this node's placement (one srun task per node)")
    run.add_argument("--work-dir", required=True, help="node-local directory for spools and working directories")
    run.add_argument("--grace", type=float, default=30.0, help="seconds from SIGTERM to SIGKILL for the command")
    run.add_argument("--gpus", choices=("auto", "simulated", "off"), default="auto", help="GPU metrics: NVML, simulated, none")
    run.add_argument("--server-type", default="g2", help="the server type (names the simulated GPUs' model)")
    run.add_argument("--metrics-interval", type=float, default=10.0, help="seconds between metric samples (0: none)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s slurm_step: %(message)s", stream=sys.stderr)
    try:
        if args.command == "token":
            print(redeem(os.environ))
            return 0
        environ = _without_own_path(dict(os.environ))
        os.environ.clear()
        os.environ.update(environ)  # the Runner's process runtime inherits os.environ
        return asyncio.run(serve(args, os.environ))
    except UsageError as exc:
        print(f"slurm_step: {exc}", file=sys.stderr, flush=True)
        return EXIT_FAILED


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
