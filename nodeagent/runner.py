"""One placement from start to report: prepare, launch through the runtime, ship lines, upload.

Every step writes a line into the job's own log stream (the user sees the preparation in the
Log tab) and every state change goes into the spool as an `attempt` message, after the lines
that led to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import warm
from .envcache import EnvironmentCache, EnvironmentFailed, PreparedEnvironment
from .environment import VENDOR_DIR
from .logstream import LogStream, Outbox
from .protocol import Placement
from .runtimes import Execution, ExitStatus, ImageError, LaunchSpec, Runtime
from .storage import Storage, StorageError
from .teardown_noise import TeardownNoiseFolder
from .trainmetrics import TrainingMetrics
from .workdirs import attempt_paths, write_marker

log = logging.getLogger(__name__)


@dataclass
class RunnerContext:
    """What every runner of this agent shares."""

    node_name: str
    work_dir: Path
    runtime: Runtime
    outbox: Outbox
    storage: Callable[[], Storage | None]  # built on demand: the settings may arrive with `welcome`
    default_grace: float
    vendor_dir: Path = VENDOR_DIR
    # after the command exits, before the exit report (e.g. the last checkpoint commit)
    after_command: Callable[[Runner], Awaitable[None]] | None = None
    # training environments built on this node (process runtime); None: the node's own Python
    environments: EnvironmentCache | None = None


class PreparationFailed(Exception):
    """The placement cannot run; `failure` is one of protocol.PREPARATION_FAILURES."""

    def __init__(self, message: str, failure: str, image_error: bool = False, exit_code: int | None = 1) -> None:
        super().__init__(message)
        self.message, self.failure, self.image_error, self.exit_code = message, failure, image_error, exit_code


class Runner:
    def __init__(self, placement: Placement, ctx: RunnerContext) -> None:
        self.placement = placement
        self.ctx = ctx
        self.paths = attempt_paths(ctx.work_dir, placement)
        self.log = LogStream(ctx.outbox, placement["job_id"], placement["attempt"], placement["role"])
        self.training = TrainingMetrics(ctx.outbox, placement["job_id"], placement["role"])  # loss etc. in the lines
        self.state = "assigned"  # as in the marker; the metrics sampler counts "running" GPUs as busy
        self.stop_reason = ""
        self.crashed = ""
        self.prepared_environment: PreparedEnvironment | None = None
        self._stop_requested = asyncio.Event()

    @property
    def grace(self) -> float:
        value = self.placement.get("stop_grace_seconds")
        return float(value) if value is not None else self.ctx.default_grace

    def crash(self, reason: str) -> None:
        """A hardware fault killed the command (simulated GPUs): no grace, like a real crash."""
        if not self._stop_requested.is_set():
            self.crashed = reason
            self.request_stop(f"hardware fault: {reason}")

    def request_stop(self, reason: str) -> None:
        """Idempotent: a second `desired` without this placement must not restart the grace period."""
        if not self._stop_requested.is_set():
            self.stop_reason = reason
            self._stop_requested.set()

    async def run(self) -> None:
        try:
            await self._run()
        except Exception as exc:  # a bug here must not take the agent down or leave the console waiting
            log.exception("placement %s/%s/%s failed in the agent", self.placement["job_id"], self.placement["attempt"], self.placement["role"])
            self.log.error(f"The node agent failed: {exc}")
            self._finish(ExitStatus(None, None), message=f"the node agent failed: {exc}", failure="environment")

    async def _run(self) -> None:
        p = self.placement
        self.paths.create()
        self._mark("preparing")
        self.ctx.outbox.attempt(p, "preparing")
        started = time.monotonic()
        self.log.info(f"Preparing the training environment on node {self.ctx.node_name} (attempt {p['attempt']}, role {p['role']})")
        try:
            completed = await self._unless_stopped(self._prepare())
        except PreparationFailed as failed:
            self.log.error(failed.message)
            self._finish(ExitStatus(failed.exit_code, None), message=failed.message, image_error=failed.image_error,
                         failure=failed.failure)
            return
        if not completed:
            self.log.info(f"Stopped before the command started ({self.stop_reason})")
            self._finish(ExitStatus(None, None), message=f"stopped before the command started: {self.stop_reason}")
            return
        self.log.info(f"Environment ready ({time.monotonic() - started:.1f} s); sidecar container is running and ready for training process to run!")
        self.log.info(f"Starting the command: {p['command']}")
        spec = LaunchSpec(p, self.paths.workdir, self.paths.output_dir, self._command_environment())
        output = TeardownNoiseFolder(self.training.tap(self.log.line))  # torchrun's exit-barrier noise → one line
        try:
            execution = await self.ctx.runtime.start(spec, output.feed)
        except ImageError as exc:  # a warm start skipped the pull, and the image has gone since
            self.log.error(str(exc))
            self._finish(ExitStatus(None, None), message=str(exc), image_error=True, failure="image_pull")
            return
        except Exception as exc:  # bash missing, the Docker engine refusing the GPUs, ...
            self.log.error(f"The command could not be started: {exc}")
            self._finish(ExitStatus(None, None), message=f"the command could not be started: {exc}", failure="environment")
            return
        self._mark("running", execution.marker)
        self.log.flush()
        self.ctx.outbox.attempt(p, "running")
        status = await self._wait(execution)
        output.close()
        if self.ctx.after_command is not None:
            with contextlib.suppress(Exception):
                await self.ctx.after_command(self)
        if status.signal is not None:
            self.log.info(f"Command killed by signal {_signal_name(status.signal)}")
        else:
            self.log.info(f"Command exited with code {status.exit_code}")
        output_url, upload_error = await self._upload()
        message = f"crashed: {self.crashed}" if self.crashed else f"stopped: {self.stop_reason}" if self.stop_reason else ""
        self._finish(status, message="; ".join(m for m in (message, upload_error) if m), output_url=output_url,
                     failure="output_upload" if upload_error else "")

    async def _unless_stopped(self, work: Any) -> bool:
        """Run `work` unless a stop arrives first (then cancel it): True when it completed."""
        task = asyncio.ensure_future(work)
        stopped = asyncio.ensure_future(self._stop_requested.wait())
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if task.done():
            task.result()  # re-raises PreparationFailed
            return True
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, PreparationFailed):
            await task
        return False

    def _command_environment(self) -> dict[str, str]:
        runtime = self.ctx.runtime
        env = runtime.environment(self.placement, self.paths.output_dir)
        if self.prepared_environment is not None:
            env = self.prepared_environment.activate(env)
        return runtime.with_launchers(env)  # deepspeed/accelerate wrappers before the environment's own

    async def _prepare(self) -> None:
        p = self.placement
        if not await warm.reuse(p, self.ctx.work_dir, self.paths.workdir, self.log, self.ctx.storage):
            await self._prepare_cold()  # else: a warm start, the files an earlier job of this user prepared are here
        self.prepared_environment = await self._prepare_environment()

    async def _prepare_environment(self) -> PreparedEnvironment | None:
        """The job's framework and version as a Python environment (process runtime, cached)."""
        spec = self.placement.get("environment")
        if spec is None:
            return None
        label = f"{spec['name']} ({spec['framework_label']} {spec['version']})"
        if not self.ctx.runtime.builds_environments:
            holder = f"; {spec['image']} is an image that holds it" if spec.get("image") and spec["image"] != self.placement.get("image") else ""
            self.log.info(f"Training environment {label}: provided by the job's image {self.placement.get('image')}{holder}")
            return None
        if self.ctx.environments is None:
            self.log.warning(f"Training environment {label}: this agent builds no environments; the node's own Python runs the command")
            return None
        try:
            return await self.ctx.environments.prepare(spec, self.log)
        except (EnvironmentFailed, OSError) as exc:  # OSError: the cache directory itself (disk full, permissions)
            raise PreparationFailed(
                f"Training environment {spec['name']} could not be prepared on node {self.ctx.node_name}: {exc}", "environment",
            ) from exc

    async def _prepare_cold(self) -> None:
        p = self.placement
        try:
            await self.ctx.runtime.prepare_image(p, self.log)
        except ImageError as exc:
            raise PreparationFailed(str(exc), "image_pull", image_error=True, exit_code=None) from exc
        if p.get("script_url"):
            await self._download_script(p["script_url"])
        if (self.ctx.vendor_dir / "datastates").is_dir():
            self.log.info("Concurrent Checkpoint library is installed")
        else:
            self.log.warning(f"Concurrent Checkpoint library not found in {self.ctx.vendor_dir}")
        await warm.remember(p, self.ctx.work_dir, self.paths.workdir, self.ctx.storage)

    async def _download_script(self, url: str) -> None:
        started = time.monotonic()
        try:
            storage = await asyncio.to_thread(self.ctx.storage)
            if storage is None:
                raise StorageError(f"Cannot download the training script {url}: no object storage is configured (S3_ENDPOINT_URL or the console's settings)")
            _, size = await asyncio.to_thread(storage.download, url, self.paths.workdir)
        except StorageError as exc:
            raise PreparationFailed(str(exc), "script_download") from exc
        self.log.info(f"Downloading training script {url} ({size} bytes, {time.monotonic() - started:.1f} s)")

    async def _wait(self, execution: Execution) -> ExitStatus:
        async def stop_when_requested() -> None:
            await self._stop_requested.wait()
            if self.crashed:
                self.log.error(f"CUDA error: the GPU is no longer usable ({self.crashed}); the command dies")
                await execution.stop(0)
                return
            self.log.info(f"Stopping the command ({self.stop_reason}): SIGTERM, then SIGKILL after {self.grace:g} s")
            await execution.stop(self.grace)

        stopper = asyncio.create_task(stop_when_requested())
        try:
            return await execution.wait()
        finally:
            stopper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stopper

    async def _upload(self) -> tuple[str, str]:
        """Upload OUTPUT_DIR to `<output_prefix>/<role>`; returns (output_url or "", error or "").

        The role keeps the nodes of one attempt from overwriting each other's files (every
        rank-0-of-its-node writes e.g. model.pt); the console derives the job's result URL
        from the output_url by dropping `attempt-N/<role>`.
        """
        base = self.placement.get("output_prefix") or ""
        if not base:
            return "", ""
        prefix = f"{base.rstrip('/')}/{self.paths.workdir.name}"
        if not any(path.is_file() for path in self.paths.output_dir.rglob("*")):
            self.log.info("OUTPUT_DIR is empty: nothing to upload")
            return "", ""
        try:
            storage = await asyncio.to_thread(self.ctx.storage)
            if storage is None:
                raise StorageError("no object storage is configured")
            count = await asyncio.to_thread(storage.upload_tree, self.paths.output_dir, prefix)
        except StorageError as exc:
            self.log.error(f"Output not uploaded to {prefix}: {exc}")
            return "", f"output not uploaded to {prefix}: {exc}"
        self.log.info(f"Output uploaded to {prefix} ({count} files)")
        return prefix, ""

    def _finish(self, status: ExitStatus, message: str = "", image_error: bool = False, output_url: str = "",
                failure: str = "") -> None:
        self.log.flush()  # every line before the exit report
        self.training.flush()
        fields: dict[str, Any] = {"exit_code": status.exit_code, "signal": status.signal}
        if output_url:
            fields["output_url"] = output_url
        if message:
            fields["message"] = message
        if image_error:
            fields["image_error"] = True
        if failure:
            fields["failure"] = failure
        self.ctx.outbox.attempt(self.placement, "exited", **fields)
        # after the spool append: a crash in between re-reports the exit (harmless) instead of losing it
        self._mark("exited")
        warm.release(self.placement, self.ctx.work_dir)  # the kept environment's keep-alive starts

    def _mark(self, state: str, execution: dict[str, Any] | None = None) -> None:
        self.state = state
        p = self.placement
        with contextlib.suppress(OSError):  # the marker is a recovery aid; a full disk must not stop the job
            write_marker(self.paths.marker, {
                "job_id": p["job_id"], "attempt": p["attempt"], "role": p["role"], "state": state,
                "runtime": self.ctx.runtime.name, "execution": execution or {}, "grace": self.grace,
            })


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
