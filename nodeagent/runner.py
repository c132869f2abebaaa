"""One placement from start to report: prepare, launch through the runtime, ship lines, upload.

Every step writes a line into the job's own log stream (the user sees the preparation in the
Log tab) and every state change goes into the spool as an `attempt` message, after the lines
that led to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import reuse, warm
from .cachecap import Uses, trim
from .envcache import EnvironmentCache, EnvironmentFailed, PreparedEnvironment
from .environment import VENDOR_DIR, inherited
from .inputs import InputError, Synced, sync_inputs, variable
from .logstream import LogStream, Outbox
from .outputs import upload_output
from .projects import ProjectError, ensure_project, format_bytes, hand_project, tenant_key
from .protocol import Placement
from .requirements import REQUIREMENTS, OverlayCache, PreparedOverlay, RequirementsFailed
from .runtimes import Execution, ExitStatus, ImageError, LaunchSpec, Runtime
from .storage import Storage, StorageError, routed_environment
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
    # a placement's object storage, with its attempt's own credentials (None: it has none)
    storage: Callable[[Placement], Storage | None]
    default_grace: float
    vendor_dir: Path = VENDOR_DIR
    # after the command exits, before the exit report (e.g. the last checkpoint commit)
    after_command: Callable[[Runner], Awaitable[None]] | None = None
    # training environments built on this node (process runtime); None: the node's own Python
    environments: EnvironmentCache | None = None
    cache_cap: int | None = None  # bytes the node's project, input and overlay caches may hold (nodeagent.cachecap)


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
        self.project: Path | None = None  # the unpacked workdir in the node's cache
        self.project_view: Path | None = None  # that tree, laid under the working directory (not copied)
        self.inputs: list[Synced] = []
        self.overlay: PreparedOverlay | None = None  # requirements.txt installed on top of the environment
        self.uses = Uses()  # the cache entries it uses, never evicted meanwhile
        self._stop_requested = asyncio.Event()
        self._storage: list[Storage | None] = []  # made once, on first use (a client costs ~20 ms)

    def storage(self) -> Storage | None:
        """Object storage with this placement's own credentials; blocking (call it in a thread)."""
        if not self._storage:
            self._storage.append(self.ctx.storage(self.placement))
        return self._storage[0]

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
        finally:
            self.uses.release()

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
        self.log.info(f"Environment ready ({time.monotonic() - started:.1f} s); {self.ctx.runtime.ready_words}")
        self.log.info(f"Starting the command: {p['command']}")
        spec = LaunchSpec(p, self.paths.workdir, self.paths.output_dir, self._command_environment(),
                          inputs=tuple((item.name, item.path) for item in self.inputs), project=self.project_view,
                          requirements=self.overlay.path if self.overlay is not None and self.overlay.user_base else None)
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
        try:
            await self._run_started(execution, output)
        finally:
            await execution.release()  # its files back to the agent, its Unix user free again

    async def _run_started(self, execution: Execution, output: TeardownNoiseFolder) -> None:
        p = self.placement
        if execution.isolation:
            self.log.info(f"Isolation: {execution.isolation}")
        self._mark("running", execution.marker)
        self.log.flush()
        self.ctx.outbox.attempt(p, "running")
        status = await self._wait(execution)
        output.close()
        if self.ctx.after_command is not None:
            with contextlib.suppress(Exception):
                await self.ctx.after_command(self)
        if status.signal is not None:
            self.log.info(f"Command killed by signal {status.signal_name}")
        else:
            self.log.info(f"Command exited with code {status.exit_code}")
        if execution.resources:
            self.log.info(f"Resources used: {execution.resources}")
        output_url, upload_error = await upload_output(self.placement, self.paths.workdir.name, self.paths.output_dir,
                                                       self.storage, self.log)
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
        env = routed_environment(runtime.environment(self.placement, self.paths.output_dir), os.environ)
        if self.prepared_environment is not None:
            env = self.prepared_environment.activate(env)
        if self.overlay is not None:
            env = self.overlay.activate(env)
        for item in self.inputs:
            env[variable(item.name)] = str(item.path)
        mount = (self.placement.get("mount_path") or "").rstrip("/")
        if (mount == "/root" or mount.startswith("/home/")) and "HF_HOME" not in (self.placement.get("env") or {}):
            # a share at a home directory (the seed's /root) holds ~/.cache/huggingface; the job's own
            # HOME is its working directory's, so Hugging Face is told where that cache is
            env["HF_HOME"] = f"{mount}/.cache/huggingface"
        return runtime.with_launchers(env)  # deepspeed/accelerate wrappers before the environment's own

    async def _prepare(self) -> None:
        p = self.placement
        # what this node can never give the placement fails it before minutes of preparation
        problem = await asyncio.to_thread(self.ctx.runtime.placement_problem, p, self.paths.workdir, self.paths.output_dir)
        if problem:
            raise PreparationFailed(problem, "environment")
        reused = await asyncio.to_thread(reuse.take_over, self.ctx.work_dir, p, self.paths)
        if reused is not None:
            self.log.info(reused.line())
        elif not await warm.reuse(p, self.ctx.work_dir, self.paths.workdir, self.log, self.storage,
                                  uses_image=self.ctx.runtime.uses_image):
            await self._prepare_cold()  # else: a warm start, the files an earlier job of this user prepared are here
        if p.get("workdir"):
            await self._prepare_project(copy=reused is None)
        if p.get("inputs"):
            await self._prepare_inputs()
        self.prepared_environment = await self._prepare_environment()
        if self.project is not None and (self.project / REQUIREMENTS).is_file():
            await self._prepare_requirements(self.project)
        grew = self.uses.grew or any(item.downloaded_files for item in self.inputs) or bool(self.overlay and not self.overlay.cached)
        if self.ctx.cache_cap is not None and grew:  # what this placement added may take the caches over their cap
            await asyncio.to_thread(trim, self.ctx.work_dir, self._overlays().root, self.ctx.cache_cap)

    def _say(self) -> Any:  # the job log's info() for a worker thread (the log stream belongs to the event loop)
        loop = asyncio.get_running_loop()
        return lambda text: loop.call_soon_threadsafe(self.log.info, text)

    async def _prepare_project(self, copy: bool = True) -> None:
        """The user's project as the command's working directory: the node's cached copy, or downloaded and
        unpacked now; laid under it copy-on-write where the runtime can (the sandbox), else copied
        (unless `copy` is off: the interrupted attempt's copy, taken over, holds it already)."""
        p = self.placement
        spec = p["workdir"]
        try:
            storage = await asyncio.to_thread(self.storage)
            ready = await asyncio.to_thread(ensure_project, self.ctx.work_dir, p, storage, self._say(), self.uses.hold)
            self.uses.grew |= ready.downloaded
            laid = await asyncio.to_thread(self.ctx.runtime.lays_projects, self.ctx.work_dir)
            if copy or laid:  # a taken-over directory under a view holds only the job's own writes
                kept, given = await asyncio.to_thread(hand_project, ready.tree, self.paths.workdir, laid)
            else:
                kept, given = [], "the interrupted attempt's copy reused"
            self.project_view = ready.tree if laid else None
        except (ProjectError, StorageError, OSError) as exc:
            raise PreparationFailed(f"The workdir could not be prepared on node {self.ctx.node_name}: {exc}",
                                    "workdir_download") from exc
        how = (f"downloaded and unpacked in {ready.seconds:.1f} s" if ready.downloaded
               else "already on this node, nothing downloaded")
        self.log.info(f"Workdir {spec['sha256'][:12]}: {ready.files} files, {format_bytes(ready.bytes)} ({how}); {given}")
        if kept:
            self.log.warning(f"Workdir: kept what the job's directory already held over the project's "
                             f"{', '.join(kept[:5])}{' …' if len(kept) > 5 else ''}")
        self.project = ready.tree

    async def _prepare_inputs(self) -> None:
        try:
            storage = await asyncio.to_thread(self.storage)
            self.inputs = await asyncio.to_thread(sync_inputs, self.ctx.work_dir, self.placement, storage, self._say(),
                                                  tenant_key(self.placement), self.uses.hold)
        except (InputError, StorageError, OSError) as exc:
            raise PreparationFailed(f"The inputs could not be synced onto node {self.ctx.node_name}: {exc}",
                                    "input_download") from exc

    async def _prepare_requirements(self, project: Path) -> None:
        runtime, tenant, spec = self.ctx.runtime, tenant_key(self.placement), self.placement.get("environment")
        passed = inherited(os.environ, runtime.pass_env)
        try:
            if runtime.installs_requirements:
                self.overlay = await self._overlays().prepare(
                    project, self.prepared_environment, list(spec["requirements"]) if spec else [], tenant,
                    self.placement, runtime.run_build, self.log, passed, self.uses.hold)
            else:  # in the job's image (Docker), or not at all
                self.overlay = await runtime.image_requirements(project, self.placement, tenant, self._overlays().root,
                                                                self.log, passed, self.uses.hold)
        except (RequirementsFailed, OSError) as exc:
            raise PreparationFailed(f"{exc}" if isinstance(exc, RequirementsFailed)
                                    else f"requirements.txt could not be installed: {exc}", "requirements") from exc
        if self.overlay is None:
            self.log.warning(f"requirements.txt: not installed by the {runtime.name} runtime (install the packages in "
                             "the image, or run `pip install -r requirements.txt` in the command)")

    def _overlays(self) -> OverlayCache:
        return OverlayCache(self.ctx.environments.root if self.ctx.environments is not None else self.ctx.work_dir / "envs")

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
        await warm.remember(p, self.ctx.work_dir, self.paths.workdir, self.storage)

    async def _download_script(self, url: str) -> None:
        started = time.monotonic()
        try:
            storage = await asyncio.to_thread(self.storage)
            if storage is None:
                raise StorageError(f"Cannot download the training script {url}: the placement carries no object-storage credentials (the console has no object storage configured)")
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
        if state == "running" and execution and execution.get("pid"):
            # where simulated GPUs read how hard the command works (nodeagent.metrics)
            self.command_pid, self.running_since = int(execution["pid"]), time.monotonic()
        p = self.placement
        with contextlib.suppress(OSError):  # the marker is a recovery aid; a full disk must not stop the job
            write_marker(self.paths.marker, {
                "job_id": p["job_id"], "attempt": p["attempt"], "role": p["role"], "state": state,
                "runtime": self.ctx.runtime.name, "execution": execution or {}, "grace": self.grace,
                "prepared": reuse.identity(p),  # what a later attempt checks before it reuses the files
            })
