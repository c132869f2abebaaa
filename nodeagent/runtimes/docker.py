"""The Docker runtime: the command runs in the job's image (Docker SDK, engine from DOCKER_HOST).

The container sees the same paths as the process runtime would (working directory, OUTPUT_DIR,
CHECKPOINT_VENDOR, the volume mount path are bind-mounted at identical paths), so the
environment contract is the same for both runtimes. The SDK is blocking: every call goes
through `asyncio.to_thread`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from pathlib import Path
from typing import Any

from ..environment import VENDOR_DIR
from ..logstream import LogStream
from ..protocol import Placement
from .base import LINE_LIMIT, Execution, ExitStatus, ImageError, LaunchSpec, LineSink, Runtime, pump_lines

LABEL_PREFIX = "simpleai."


def container_name(placement: Placement) -> str:
    return f"simpleai-job{placement['job_id']}-attempt{placement['attempt']}-{placement['role']}"


def build_run_kwargs(spec: LaunchSpec, real_gpus: bool, vendor_dir: Path = VENDOR_DIR) -> dict[str, Any]:
    """The keyword arguments of `client.containers.run` for one placement (pure: unit-tested)."""
    from docker.types import DeviceRequest

    placement = spec.placement
    volumes: dict[str, dict[str, str]] = {
        str(spec.workdir): {"bind": str(spec.workdir), "mode": "rw"},  # script in, OUTPUT_DIR out
        str(vendor_dir): {"bind": str(vendor_dir), "mode": "ro"},  # CHECKPOINT_VENDOR
    }
    if placement.get("mount_path"):
        # the File Storage volume is mounted on the node at the job's mount path
        volumes[placement["mount_path"]] = {"bind": placement["mount_path"], "mode": "rw"}
    kwargs: dict[str, Any] = {
        "image": placement["image"],
        "command": ["bash", "-c", placement["command"]],
        "name": container_name(placement),
        "environment": dict(spec.env),
        "working_dir": str(spec.workdir),
        "volumes": volumes,
        "network_mode": "host",  # torch.distributed rendezvous on MASTER_ADDR:MASTER_PORT across nodes
        "labels": {
            f"{LABEL_PREFIX}job": str(placement["job_id"]),
            f"{LABEL_PREFIX}job-name": placement["job_name"],
            f"{LABEL_PREFIX}attempt": str(placement["attempt"]),
            f"{LABEL_PREFIX}role": placement["role"],
        },
        "detach": True,
    }
    if placement.get("shm_size_gb"):
        kwargs["shm_size"] = f"{placement['shm_size_gb']}g"
    if real_gpus and placement["gpu_indices"]:
        # inside the container the GPUs are renumbered from 0: no CUDA_VISIBLE_DEVICES needed
        kwargs["device_requests"] = [DeviceRequest(
            device_ids=[str(index) for index in placement["gpu_indices"]], capabilities=[["gpu"]],
        )]
    return kwargs


class PullRefused(Exception):
    """The engine's pull stream ended with an error event (its text says why)."""


def classify_pull_error(exc: BaseException) -> str:
    """authentication failed | not found | invalid reference | pull failed."""
    from docker import errors

    text = f"{exc} {getattr(exc, 'explanation', '') or ''}".lower()
    status = getattr(exc, "status_code", None)
    # Podman's Docker API reports a refused login as ImageNotFound: read the text first
    if status in (401, 403) or any(word in text for word in ("unauthorized", "authentication required", "denied", "incorrect username or password")):
        return "authentication failed"
    if isinstance(exc, errors.InvalidRepository | errors.NullResource) or "invalid reference" in text \
            or "invalid repository name" in text or "repository name must" in text or status == 400:
        return "invalid reference"
    if isinstance(exc, errors.NotFound) or status == 404 or any(word in text for word in ("not found", "manifest unknown", "no such image")):
        return "not found"
    return "pull failed"


_HINTS = {
    "authentication failed": "check the registry username and password of the job",
    "not found": "check the image name and tag",
    "invalid reference": "an image looks like registry.example.com/team/name:tag",
    "pull failed": "the registry or the Docker engine failed",
}


def pull_error_message(image: str, exc: BaseException) -> str:
    kind = classify_pull_error(exc)
    return f"Image {image} could not be pulled: {kind} ({_HINTS[kind]}): {exc}"


class DockerExecution(Execution):
    def __init__(self, container: Any, sink: LineSink) -> None:
        self.container = container
        self.marker = {"container": container.id}
        self._stopping = False
        loop = asyncio.get_running_loop()
        # the SDK's log stream is a blocking iterator of chunks: a thread feeds them into a
        # StreamReader so lines are cut exactly like the process runtime's
        self._reader = asyncio.StreamReader(limit=LINE_LIMIT)
        threading.Thread(target=self._follow_logs, args=(loop,), daemon=True, name=f"logs-{container.id[:12]}").start()
        self._pump = asyncio.create_task(pump_lines(self._reader, sink))

    def _follow_logs(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            for chunk in self.container.logs(stdout=True, stderr=True, stream=True, follow=True):
                loop.call_soon_threadsafe(self._reader.feed_data, chunk)
        except Exception:  # the engine went away: the exit status says what happened
            pass
        finally:
            with contextlib.suppress(RuntimeError):  # loop already closed at agent exit
                loop.call_soon_threadsafe(self._reader.feed_eof)

    async def wait(self) -> ExitStatus:
        result = await asyncio.to_thread(self.container.wait)
        await asyncio.wait({self._pump}, timeout=5)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.container.remove, force=True)
        code = int(result.get("StatusCode", -1))
        if self._stopping and code - 128 in (signal.SIGTERM, signal.SIGKILL):
            return ExitStatus(exit_code=None, signal=code - 128)
        return ExitStatus(exit_code=code, signal=None)

    async def stop(self, grace: float) -> None:
        self._stopping = True
        with contextlib.suppress(Exception):  # already gone
            await asyncio.to_thread(self.container.stop, timeout=max(1, round(grace)))


class DockerRuntime(Runtime):
    name = "docker"
    inherits_environment = False

    def __init__(self, real_gpus: bool, client: Any = None) -> None:
        super().__init__(real_gpus)
        if client is None:
            import docker

            client = docker.from_env()
            client.ping()  # fail at agent start, not at the first job, when DOCKER_HOST is wrong
        self.client = client

    async def prepare_image(self, placement: Placement, log: LogStream) -> None:
        from docker import errors
        from docker.utils import parse_repository_tag

        image = placement["image"]
        if not image:
            raise ImageError("the job names no image, and the Docker runtime needs one")
        repository, tag = parse_repository_tag(image)
        always = tag in (None, "latest")  # a moving tag is pulled every time, like Kubernetes
        if not always:
            try:
                await asyncio.to_thread(self.client.images.get, image)
                log.info(f"Image {image} already present")
                return
            except errors.ImageNotFound:
                pass
            except Exception as exc:
                raise ImageError(pull_error_message(image, exc)) from exc
        log.info(f"Pulling image {image}")
        started = time.monotonic()
        registry = placement.get("registry")
        auth = {"username": registry["username"], "password": registry["password"]} if registry else None
        try:
            await asyncio.to_thread(self._pull, repository, tag or "latest", auth)
        except Exception as exc:
            raise ImageError(pull_error_message(image, exc)) from exc
        log.info(f"Pulled image {image} ({time.monotonic() - started:.1f} s)")

    def _pull(self, repository: str, tag: str, auth: dict[str, str] | None) -> None:
        # The low-level stream, not `images.pull`: a registry refusal arrives as an `error`
        # event inside a 200 response, which `images.pull` ignores before failing with a
        # misleading "no such image".
        sep = "@" if tag.startswith("sha256:") else ":"
        for event in self.client.api.pull(repository, tag=tag, stream=True, decode=True, auth_config=auth):
            if isinstance(event, dict) and event.get("error"):
                raise PullRefused(str(event["error"]))
        self.client.images.get(f"{repository}{sep}{tag}")

    async def start(self, spec: LaunchSpec, sink: LineSink) -> Execution:
        kwargs = build_run_kwargs(spec, self.real_gpus)
        await self._remove_leftover(kwargs["name"])
        container = await asyncio.to_thread(self.client.containers.run, **kwargs)
        return DockerExecution(container, sink)

    async def _remove_leftover(self, name: str) -> None:
        """A container of the same name from a crashed agent would make `run` fail with 409."""
        with contextlib.suppress(Exception):
            old = await asyncio.to_thread(self.client.containers.get, name)
            await asyncio.to_thread(old.remove, force=True)

    async def kill_orphan(self, marker: dict[str, Any], grace: float) -> None:
        if not marker.get("container"):
            return
        with contextlib.suppress(Exception):  # NotFound: it is already gone
            container = await asyncio.to_thread(self.client.containers.get, marker["container"])
            await asyncio.to_thread(container.stop, timeout=max(1, round(grace)))
            await asyncio.to_thread(container.remove, force=True)
