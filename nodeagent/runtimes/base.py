"""What every runtime offers the runner: prepare the image, start the command, stop it."""

from __future__ import annotations

import asyncio
import os
import signal
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..environment import LAUNCHERS_DIR, training_environment
from ..logstream import LogStream
from ..protocol import Placement

if TYPE_CHECKING:
    from ..nodecache import JobLog
    from ..requirements import PreparedOverlay

LineSink = Callable[[str], None]
LINE_LIMIT = 64 * 1024  # a longer run of bytes without a newline is shipped in pieces


class ImageError(Exception):
    """The image could not be pulled (reported with image_error: true)."""


@dataclass(frozen=True)
class LaunchSpec:
    placement: Placement
    workdir: Path  # the command's working directory (fresh per attempt)
    output_dir: Path  # OUTPUT_DIR, uploaded after the exit
    env: dict[str, str]
    # (name, node path) of each input synced for the placement: what $SIMPLEAI_INPUT_<NAME> names
    inputs: tuple[tuple[str, Path], ...] = ()
    # the node's cached project tree, laid under `workdir` copy-on-write (when `lays_projects`)
    project: Path | None = None
    # the job's requirements.txt installed for its image (a PYTHONUSERBASE; containers mount it read-only)
    requirements: Path | None = None


@dataclass(frozen=True)
class ExitStatus:
    exit_code: int | None  # None when killed by a signal
    signal: int | None

    @property
    def signal_name(self) -> str:
        try:
            return signal.Signals(self.signal or 0).name
        except ValueError:
            return str(self.signal)


class Execution(ABC):
    """One started command."""

    # What the agent writes down so that, after an agent restart, it can find and stop a
    # command it no longer watches (see supervisor.recover): JSON-serialisable.
    marker: dict[str, Any]
    # what the command can reach on the node, for the job's "Isolation: …" line ("": not said)
    isolation: str = ""
    # what it used, once it has ended (peak memory, CPU time), for the job's log ("": unknown)
    resources: str = ""

    @abstractmethod
    async def wait(self) -> ExitStatus:
        """Return once the command has exited and all of its output has been handed to the sink."""

    @abstractmethod
    async def stop(self, grace: float) -> None:
        """SIGTERM, up to `grace` seconds, then SIGKILL; returns when the command is gone."""

    async def release(self) -> None:
        """After the exit report and the output upload: give back what the placement held on the
        node (its files, its Unix user). Called once, whatever happened."""
        return None  # most runtimes hold nothing beyond the command


class Runtime(ABC):
    name: str
    inherits_environment: bool  # the process runtime passes the agent's PATH, LANG, ... along (an allow-list)
    builds_environments: bool  # the process runtime builds the job's training environment on the node
    pass_env: tuple[str, ...] = ()  # names of the agent's environment the operator passes on (--pass-env)
    installs_requirements = False  # a workdir's requirements.txt is installed by `run_build` (process runtime)
    # the end of the "Environment ready" line: what the command is about to run in
    ready_words = "the command runs as a process on this node (no container)"
    uses_image = False  # the job's AI Training Image is pulled and run (containers)

    def __init__(self, real_gpus: bool) -> None:
        self.real_gpus = real_gpus

    def lays_projects(self, work_dir: Path) -> bool:
        """Whether a job's project can be a copy-on-write view of the node's cached tree
        (LaunchSpec.project) instead of a copy in its working directory. Blocking."""
        return False

    def environment(self, placement: Placement, output_dir: Path) -> dict[str, str]:
        """The command's environment; under the process runtime the agent's own by its allow-list
        (nodeagent.environment.inherited) and the operator's --pass-env names."""
        return training_environment(
            placement, output_dir=output_dir, base=os.environ if self.inherits_environment else None,
            cuda_visible_devices=self.real_gpus and self.inherits_environment, cpu_node=not self.real_gpus,
            pass_env=self.pass_env,
        )

    def with_launchers(self, env: dict[str, str]) -> dict[str, str]:
        """The platform's `deepspeed`/`accelerate` wrappers (nodeagent/launchers) first on PATH:
        they join every node of a job into one world without ssh."""
        rest = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p != str(LAUNCHERS_DIR)]
        return {**env, "PATH": os.pathsep.join([str(LAUNCHERS_DIR), *rest])}

    def placement_problem(self, placement: Placement, workdir: Path, output_dir: Path) -> str:
        """Why this node can never run the placement ("" when it can), e.g. a File Storage mount
        path without File Storage here: checked before any preparation (blocking: call it in a thread)."""
        return ""

    async def run_build(self, placement: Placement, directory: Path, command: str, env: dict[str, str],
                        sink: LineSink) -> int:
        """Run a build step (pip) for the placement as its job's user, never root, in `directory`;
        returns its exit code (128 + N when killed by signal N)."""
        raise NotImplementedError(f"the {self.name} runtime builds nothing on the node")

    async def image_requirements(self, project: Path, placement: Placement, tenant: str, root: Path, log: JobLog,
                                 inherited: dict[str, str], hold: Callable[[Path], None]) -> PreparedOverlay | None:
        """A runtime that does not `installs_requirements` with `run_build` may install a project's
        requirements.txt its own way (the job's image: Docker) into the cache under `root`, returning
        a requirements.PreparedOverlay; None: it does not (the job's log says so)."""
        return None

    @abstractmethod
    async def prepare_image(self, placement: Placement, log: LogStream) -> None:
        """Make the image available (or say why it is not needed); raise ImageError on failure."""

    @abstractmethod
    async def start(self, spec: LaunchSpec, sink: LineSink) -> Execution:
        """Launch the command; every output line (stdout and stderr) goes to `sink`."""

    @abstractmethod
    async def kill_orphan(self, marker: dict[str, Any], grace: float) -> None:
        """Stop a command started by an earlier agent process, if it still runs."""

    async def remove_strays(self, grace: float) -> list[str]:
        """At agent start, after recovery: stop what an earlier agent process left without a
        marker (containers it created just before a crash); returns what it removed."""
        return []


def clean_line(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
    # progress bars redraw with \r; a terminal would show only the last drawing
    if "\r" in text:
        text = text.rsplit("\r", 1)[-1]
    return text


async def pump_lines(reader: asyncio.StreamReader, sink: LineSink) -> None:
    """Hand each line of `reader` to `sink` until EOF (a very long line arrives in pieces)."""
    after_piece = False  # the previous piece was cut at the limit: its newline is no new line
    while True:
        try:
            raw = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as end:
            if end.partial:
                sink(clean_line(end.partial))
            return
        except asyncio.LimitOverrunError as overrun:
            # `consumed` is where the newline is when the buffer already holds it (several
            # chunks arrived before this task ran): never hand on more than the limit at once
            sink(clean_line(await reader.readexactly(min(overrun.consumed, LINE_LIMIT))))
            after_piece = True
            continue
        if not (after_piece and raw in (b"\n", b"\r\n")):
            sink(clean_line(raw))
        after_piece = False
