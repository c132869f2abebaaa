"""The Docker runtime: the command runs in the job's image, through any Docker Engine API.

The engine is the one `DOCKER_HOST` names (Docker on GPU nodes; Podman's Docker-compatible
service works too). What the container is made of (its unprivileged user, its mounts at fixed
paths under /simpleai, the tenant's File Storage share, the contract's environment) is
container_spec's; here is how it is pulled, started, followed, stopped and cleaned up. The SDK
is blocking: every call goes through `asyncio.to_thread`.

Every container carries labels naming its node, job, attempt and role: an agent that starts
removes the containers of its node that it did not start itself (`remove_strays`), so a
crashed agent leaves nothing running for long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ..environment import LAUNCHERS_DIR
from ..fileshare import placement_share
from ..jobusers import IdentityPool, JobIdentity
from ..logstream import LogStream
from ..protocol import Placement, placement_key
from ..requirements import PreparedOverlay, RequirementsFailed
from . import pulls
from .base import LINE_LIMIT, Execution, ExitStatus, ImageError, LaunchSpec, LineSink, Runtime, pump_lines
from .container_spec import CONTAINER_ROOT, LABEL_PREFIX, build_run_kwargs, hand_back, hand_over
from .docker_requirements import ImageRequirements
from .engine import find_engine

log = logging.getLogger(__name__)

PULL_READ_TIMEOUT = 1800  # seconds without a pull event (a big layer may give none) before giving up
LOG_DRAIN_SECONDS = 5.0  # after the exit, time for the engine to deliver the last lines
API_TIMEOUT_SECONDS = 60  # an engine call's read timeout (docker's own default), logs and waits aside

__all__ = ["DockerExecution", "DockerRuntime", "build_run_kwargs", "find_engine"]


class DockerExecution(Execution):
    """A started container: its stdout and stderr followed like a process's two pipes.

    `ended` runs (in a thread) once the container is removed: it hands the job's files and Unix
    user back (`owner` in the marker says which, for an agent that restarts in between)."""

    def __init__(self, container: Any, sink: LineSink, logs_api: Any = None,
                 owner: dict[str, Any] | None = None, ended: Callable[[], None] | None = None) -> None:
        self.container = container
        self._logs_api = logs_api  # follows the output without a read timeout (None: the container's own client)
        self.marker = {"container": container.id, "name": getattr(container, "name", ""), **(owner or {})}
        self._ended = ended
        self._stopping = False
        loop = asyncio.get_running_loop()
        self._pumps: list[asyncio.Task[None]] = []
        # The SDK's log stream is a blocking iterator of chunks: one thread per stream feeds a
        # StreamReader, so lines are cut exactly like the process runtime's (stdout and stderr
        # separately: a half line on one never swallows a line of the other).
        for stream in ("stdout", "stderr"):
            reader = asyncio.StreamReader(limit=LINE_LIMIT)
            threading.Thread(
                target=self._follow, args=(loop, reader, stream), daemon=True, name=f"{stream}-{container.id[:12]}",
            ).start()
            self._pumps.append(asyncio.create_task(pump_lines(reader, sink)))

    def _follow(self, loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader, stream: str) -> None:
        try:
            options = {"stdout": stream == "stdout", "stderr": stream == "stderr", "stream": True, "follow": True}
            chunks = (self._logs_api.logs(self.container.id, **options) if self._logs_api is not None
                      else self.container.logs(**options))
            for chunk in chunks:
                loop.call_soon_threadsafe(reader.feed_data, chunk)
        except Exception:  # the engine went away: the exit status says what happened
            # the lines after this are not shipped: worth an operator's look
            log.warning("the %s stream of container %s ended early", stream, self.container.id[:12], exc_info=True)
        finally:
            with contextlib.suppress(RuntimeError):  # loop already closed at agent exit
                loop.call_soon_threadsafe(reader.feed_eof)

    async def wait(self) -> ExitStatus:
        result = await asyncio.to_thread(self.container.wait)
        _, pending = await asyncio.wait(self._pumps, timeout=LOG_DRAIN_SECONDS)
        for task in pending:
            task.cancel()
        # removed only now: the exit code and the last lines have been collected
        with contextlib.suppress(Exception):  # already gone (an operator removed it)
            await asyncio.to_thread(self.container.remove, force=True)
        if self._ended is not None:
            ended, self._ended = self._ended, None
            await asyncio.to_thread(ended)
        code = int(result.get("StatusCode", -1))
        if self._stopping and code - 128 in (signal.SIGTERM, signal.SIGKILL):
            return ExitStatus(exit_code=None, signal=code - 128)
        return ExitStatus(exit_code=code, signal=None)

    async def stop(self, grace: float) -> None:
        self._stopping = True
        # the engine sends SIGTERM, waits up to the timeout, then SIGKILL, and returns when it is gone
        with contextlib.suppress(Exception):  # already gone
            await asyncio.to_thread(self.container.stop, timeout=math.ceil(grace))


class DockerRuntime(Runtime):
    name = "docker"
    inherits_environment = False
    builds_environments = False  # the job's image provides its training environment
    ready_words = "sidecar container is running and ready for training process to run!"  # the seed's words
    uses_image = True

    # after the first try, a registry that does not answer is asked again after each delay
    pull_retry_delays: tuple[float, ...] = (2.0, 5.0)

    def with_launchers(self, env: dict[str, str]) -> dict[str, str]:
        # The container's PATH is the image's own, which an environment variable cannot extend:
        # `bash -c` reads BASH_ENV first, and that script puts the wrappers before it. (Node
        # paths: build_run_kwargs gives them as the container sees them.)
        return {**env, "SIMPLEAI_LAUNCHERS": str(LAUNCHERS_DIR), "BASH_ENV": str(LAUNCHERS_DIR / "bash_env.sh")}

    def __init__(self, real_gpus: bool, client: Any = None, node_name: str = "", pull_client: Any = None,
                 logs_client: Any = None, *, identities: IdentityPool | None = None,
                 file_storage_root: Path | None = None) -> None:
        """`identities`: the Unix users placements run as (the machine's defaults when not given);
        `file_storage_root`: the operator's File Storage (--file-storage-root), None when none."""
        super().__init__(real_gpus)
        self.identities = identities or IdentityPool()
        self.file_storage_root = file_storage_root
        if client is None:
            import docker

            client = docker.from_env(timeout=API_TIMEOUT_SECONDS)
            version = client.version()  # fail at agent start, not at the first job, when DOCKER_HOST is wrong
            log.info("Docker runtime: %s %s (API %s) at %s", (version.get("Components") or [{}])[0].get("Name", "engine"),
                     version.get("Version", "?"), version.get("ApiVersion", "?"),
                     os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"))
            # a pull may be silent for minutes while a big layer downloads: its own read timeout
            pull_client = pull_client or docker.from_env(timeout=PULL_READ_TIMEOUT)
            # a command may print nothing for minutes (loading data, a slow start): a read timeout
            # on its log stream ended the stream, and every later line was lost
            logs_client = logs_client or docker.from_env(timeout=None)
        self.client = client
        self.pull_api = (pull_client or client).api
        self.logs_api = logs_client.api if logs_client is not None else None
        self.node_name = node_name
        self._names: set[str] = set()  # containers this agent process started: never strays

    # -- the image ------------------------------------------------------------------------

    async def prepare_image(self, placement: Placement, log: LogStream | JobLog) -> None:
        """Pull the image with the job's credentials; an image already on the node is reused.

        The registry is asked even when the image is here: it checks the job's credentials
        (a private image pulled for one user must not run for another who cannot pull it),
        and for an image that is up to date nothing is downloaded.
        """
        from docker.utils import parse_repository_tag

        image = placement.get("image") or ""
        node = self.node_name
        if not image:
            raise ImageError(f"Image pull failed on {node}: the job names no image, and the Docker runtime needs one")
        registry = placement.get("registry") or None
        auth = {"username": registry["username"], "password": registry["password"]} if registry else None
        secrets = pulls.secret_forms(auth["username"], auth["password"]) if auth else []
        repository, tag = parse_repository_tag(image)
        tag = tag or "latest"
        before = await self._image_id(image)
        with_credentials = f" as registry user {auth['username']}" if auth else ""
        log.info(f"Pulling image {image}{with_credentials}")
        started = time.monotonic()
        try:
            tries = await self._pull_with_retries(image, repository, tag, auth, log, secrets)
        except pulls.PullError as error:
            tries = 1 + len(self.pull_retry_delays) if error.kind in pulls.RETRYABLE else 1
            if error.kind == pulls.UNREACHABLE and before:
                log.warning(f"Registry unreachable for {image} ({tries} tries); using the copy already on this node")
                return
            raise ImageError(pulls.failure_message(node, image, error, auth is not None, tries, secrets)) from None
        elapsed = time.monotonic() - started
        after = await self._image_id(image)
        again = f" after {tries} tries" if tries > 1 else ""
        if before and before == after:
            log.info(f"Image {image} already on this node (id {_short(after)}): reused, nothing downloaded "
                     f"(registry check {elapsed:.1f} s{again})")
        else:
            log.info(f"Pulled image {image} (id {_short(after)}, {await self._image_size(image)}) in {elapsed:.1f} s{again}")

    async def _pull_with_retries(self, image: str, repository: str, tag: str, auth: dict[str, str] | None,
                                 log: LogStream | JobLog, secrets: list[str]) -> int:
        """Returns how many tries it took; raises the last PullError."""
        tries = 1 + len(self.pull_retry_delays)
        for attempt, delay in enumerate([*self.pull_retry_delays, None], start=1):
            try:
                await asyncio.to_thread(self._pull_once, repository, tag, auth)
                return attempt
            except pulls.PullError as error:
                if error.kind not in pulls.RETRYABLE or delay is None:
                    raise
                detail = pulls.condense(pulls.redact(error.detail, secrets))[-pulls.DETAIL_LIMIT:]
                log.warning(f"Registry unreachable for {image} (try {attempt} of {tries}): {detail}; "
                            f"trying again in {delay:g} s")
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _pull_once(self, repository: str, tag: str, auth: dict[str, str] | None) -> None:
        # The low-level stream, not `images.pull`: a registry refusal arrives as an `error`
        # event inside a 200 response, which `images.pull` ignores before failing with a
        # misleading "no such image".
        try:
            for event in self.pull_api.pull(repository, tag=tag, stream=True, decode=True, auth_config=auth):
                if isinstance(event, dict) and event.get("error"):
                    text = str(event["error"])
                    raise pulls.PullError(pulls.classify(RuntimeError(text)), text)
            sep = "@" if ":" in tag else ":"  # a digest (sha256:...) rather than a tag
            self.client.images.get(f"{repository}{sep}{tag}")
        except pulls.PullError:
            raise
        except Exception as exc:  # APIError, ImageNotFound, the engine's connection, a read timeout
            raise pulls.PullError(pulls.classify(exc), pulls.error_text(exc)) from None

    async def _image_id(self, image: str) -> str | None:
        try:
            found = await asyncio.to_thread(self.client.images.get, image)
            return str(found.id)
        except Exception:  # not here (or the engine failed: the pull will say how)
            return None

    async def _image_size(self, image: str) -> str:
        try:
            attrs = (await asyncio.to_thread(self.client.images.get, image)).attrs
            return f"{attrs.get('Size', 0) / 1e6:.0f} MB"
        except Exception:
            return "size unknown"

    # -- the container --------------------------------------------------------------------

    async def start(self, spec: LaunchSpec, sink: LineSink) -> Execution:
        placement = spec.placement
        # first: a job that cannot have its File Storage fails at once, saying why
        share = await asyncio.to_thread(placement_share, placement, self.file_storage_root, self.identities.tenant_gid,
                                        self.node_name or "this node", [CONTAINER_ROOT])
        if await self._image_id(placement["image"]) is None:
            # preparation was skipped (a warm start reuses an earlier job's environment) and
            # the image has left the engine since: pull it with the job's credentials, or the
            # engine would try without them
            await self.prepare_image(placement, _LinesAsLog(sink))
        user = await asyncio.to_thread(self._allocate, placement)
        ended = _Release(spec, user)
        try:
            try:
                await asyncio.to_thread(hand_over, spec.workdir, spec.output_dir, user.uid, user.gid)
            except PermissionError as exc:
                raise PermissionError(f"the job runs as a Unix user of its own, and this node's agent may not hand it its "
                                      f"working directory (run the agent as root): {exc}") from None
            kwargs = build_run_kwargs(spec, self.real_gpus, self.node_name, user=user, share=share)
            name = kwargs["name"]
            self._names.add(name)
            await self._remove_leftover(name)
            try:
                container = await asyncio.to_thread(self.client.containers.run, **kwargs)
            except Exception:
                # `run` is create + start: a container that was created but did not start stays
                await self._remove_leftover(name)
                raise
        except BaseException:
            await asyncio.to_thread(ended)
            raise
        owner = {"uid": user.uid, "workdir": str(spec.workdir), "output_dir": str(spec.output_dir)}
        return DockerExecution(container, sink, self.logs_api, owner=owner, ended=ended)

    async def image_requirements(self, project: Path, placement: Placement, tenant: str, root: Path, log: JobLog,
                                 inherited: dict[str, str], hold: Callable[[Path], None]) -> PreparedOverlay | None:
        """requirements.txt installed with the image's Python, as the job's tenant (docker_requirements)."""
        builder = ImageRequirements(self.client, self.logs_api or self.client.api, self.node_name, self._allocate)
        try:
            return await builder.prepare(project, placement, tenant, root, log, inherited, hold)
        except (RequirementsFailed, OSError):
            raise
        except Exception as exc:  # the engine refused the build's container
            raise RequirementsFailed(f"requirements.txt could not be installed: its container did not run: {exc}") from exc

    def _allocate(self, placement: Placement, purpose: str = "") -> JobIdentity:
        """The placement's own Unix user, in its tenant's group (a group of its own when the
        console did not say whose job it is: it then shares nothing)."""
        tenant = placement.get("tenant")
        key = f"{self.node_name}/{placement_key(placement['job_id'], placement['attempt'], placement['role'])}{purpose}"
        user = self.identities.allocate(key, int(tenant["id"]) if tenant else 0)
        if not tenant:
            user.gid = user.uid
        return user

    async def _remove_leftover(self, name: str) -> None:
        """A container of the same name from a crashed agent would make `run` fail with 409."""
        with contextlib.suppress(Exception):
            old = await asyncio.to_thread(self.client.containers.get, name)
            await asyncio.to_thread(old.remove, force=True)

    async def kill_orphan(self, marker: dict[str, Any], grace: float) -> None:
        ref = marker.get("container") or marker.get("name")
        if not ref:
            return
        with contextlib.suppress(Exception):  # NotFound: it is already gone
            container = await asyncio.to_thread(self.client.containers.get, ref)
            await self._stop_and_remove(container, grace)
        uid = marker.get("uid")
        # the marker is the agent's own file, beside (not inside) the job's directory; a user
        # outside the job range is never handed anything back
        if isinstance(uid, int) and uid in self.identities.uids and marker.get("workdir"):
            workdir = Path(marker["workdir"])
            with contextlib.suppress(OSError):
                await asyncio.to_thread(hand_back, workdir, Path(marker.get("output_dir") or workdir / "output"), uid)

    async def remove_strays(self, grace: float) -> list[str]:
        """Stop and remove this node's containers that this agent process did not start.

        Called once at agent start, after the placements an earlier agent left have been
        recovered: what is left is a container whose attempt the agent cannot watch (its
        marker is gone, or it was created just before a crash).
        """
        if not self.node_name:
            return []
        try:
            found = await asyncio.to_thread(
                self.client.containers.list, all=True, ignore_removed=True,
                filters={"label": f"{LABEL_PREFIX}node={self.node_name}"},
            )
        except Exception:
            log.exception("could not list the containers of node %s", self.node_name)
            return []
        strays = [container for container in found if container.name not in self._names]
        for container in strays:
            labels = container.labels or {}
            log.warning(
                "removing container %s (job %s, attempt %s, role %s) left by an earlier agent process",
                container.name, labels.get(f"{LABEL_PREFIX}job"), labels.get(f"{LABEL_PREFIX}attempt"),
                labels.get(f"{LABEL_PREFIX}role"),
            )
        await asyncio.gather(*(self._stop_and_remove(container, grace) for container in strays))
        return [container.name for container in strays]

    async def _stop_and_remove(self, container: Any, grace: float) -> None:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(container.stop, timeout=math.ceil(grace))
        with contextlib.suppress(Exception):
            await asyncio.to_thread(container.remove, force=True)


class _Release:
    """Once the container is gone: the job's files back to the agent, then its user back to the pool."""

    def __init__(self, spec: LaunchSpec, user: JobIdentity) -> None:
        self.spec, self.user = spec, user

    def __call__(self) -> None:
        try:
            hand_back(self.spec.workdir, self.spec.output_dir, self.user.uid)
        except OSError:  # the user stays taken: better than handing its files to a stranger
            log.exception("could not hand the files of %s back; its user %d stays reserved", self.spec.workdir, self.user.uid)
            return
        self.user.release()


class JobLog(Protocol):
    def info(self, text: str) -> None: ...

    def warning(self, text: str) -> None: ...


class _LinesAsLog:
    """The job's log for `start`, which gets only the line sink: the same prefixes as LogStream's."""

    def __init__(self, sink: LineSink) -> None:
        self.sink = sink

    def info(self, text: str) -> None:
        self.sink(f"[INFO] {text}")

    def warning(self, text: str) -> None:
        self.sink(f"[WARN] {text}")


def _short(image_id: str | None) -> str:
    return (image_id or "unknown").removeprefix("sha256:")[:12]
