"""What every runtime offers the runner: prepare the image, start the command, stop it."""

from __future__ import annotations

import asyncio
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..environment import LAUNCHERS_DIR, training_environment
from ..logstream import LogStream
from ..protocol import Placement

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


@dataclass(frozen=True)
class ExitStatus:
    exit_code: int | None  # None when killed by a signal
    signal: int | None


class Execution(ABC):
    """One started command."""

    # What the agent writes down so that, after an agent restart, it can find and stop a
    # command it no longer watches (see supervisor.recover): JSON-serialisable.
    marker: dict[str, Any]

    @abstractmethod
    async def wait(self) -> ExitStatus:
        """Return once the command has exited and all of its output has been handed to the sink."""

    @abstractmethod
    async def stop(self, grace: float) -> None:
        """SIGTERM, up to `grace` seconds, then SIGKILL; returns when the command is gone."""


class Runtime(ABC):
    name: str
    inherits_environment: bool  # the process runtime passes the agent's PATH, HOME, ... along
    builds_environments: bool  # the process runtime builds the job's training environment on the node

    def __init__(self, real_gpus: bool) -> None:
        self.real_gpus = real_gpus

    def environment(self, placement: Placement, output_dir: Path) -> dict[str, str]:
        return training_environment(
            placement, output_dir=output_dir, base=os.environ if self.inherits_environment else None,
            cuda_visible_devices=self.real_gpus and self.inherits_environment, cpu_node=not self.real_gpus,
        )

    def with_launchers(self, env: dict[str, str]) -> dict[str, str]:
        """The platform's `deepspeed`/`accelerate` wrappers (nodeagent/launchers) first on PATH:
        they join every node of a job into one world without ssh."""
        rest = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p != str(LAUNCHERS_DIR)]
        return {**env, "PATH": os.pathsep.join([str(LAUNCHERS_DIR), *rest])}

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
