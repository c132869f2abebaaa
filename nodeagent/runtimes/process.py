"""The process runtime (default): the command runs on the node under `bash -c`.

The image is ignored. Each command gets its own session (process group) so that stopping it
reaches torchrun's workers and anything else it spawned, like `docker stop` would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

from ..logstream import LogStream
from ..protocol import Placement
from .base import LINE_LIMIT, Execution, ExitStatus, LaunchSpec, LineSink, Runtime, pump_lines

STRAY_WAIT = 1.0  # seconds to let pipes drain after bash exits before killing leftovers
EXIT_POLL = 0.05
TREE_POLL = 1.0  # seconds between snapshots of the command's process tree


class ProcessExecution(Execution):
    def __init__(self, process: asyncio.subprocess.Process, sink: LineSink) -> None:
        self.process = process
        self.pgid = process.pid  # start_new_session: the leader's pid is the group id
        self.marker = {"pid": process.pid, "start_time": process_start_time(process.pid)}
        assert process.stdout is not None and process.stderr is not None
        self._readers = [
            asyncio.create_task(pump_lines(process.stdout, sink)),
            asyncio.create_task(pump_lines(process.stderr, sink)),
        ]
        self.seen: set[tuple[int, int | None]] = set()
        self._tree_watcher = asyncio.create_task(self._watch_tree())

    async def _leader_exit(self) -> int:
        # Not `process.wait()`: on Python 3.11 it also waits for the pipes to close, which a
        # background child holding them would delay forever; returncode is set at the exit.
        while self.process.returncode is None:
            await asyncio.sleep(EXIT_POLL)
        return self.process.returncode

    async def _watch_tree(self) -> None:
        # Launchers such as torchrun start their workers in sessions of their own: the group
        # kill misses them, and once the launcher dies they belong to init. Remember every
        # descendant (pid, start time) while the command runs, so none outlives it.
        while self.process.returncode is None:
            self.seen.update(descendants(self.process.pid))
            await asyncio.sleep(TREE_POLL)

    def _kill_everything(self) -> None:
        self.seen.update(descendants(self.process.pid))
        _killpg(self.pgid, signal.SIGKILL)
        for pid, started in list(self.seen):
            if process_start_time(pid) == started:  # still the same process, not a reused pid
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    async def wait(self) -> ExitStatus:
        code = await self._leader_exit()
        # A background child (`cmd &`) may still hold the pipes; like a container, everything
        # of the command ends with it, so give the pipes a moment and then kill the rest.
        _, pending = await asyncio.wait(self._readers, timeout=STRAY_WAIT)
        self._kill_everything()
        if pending:
            _, pending = await asyncio.wait(pending, timeout=STRAY_WAIT)
            for task in pending:  # a grandchild that escaped the group still holds a pipe
                task.cancel()
        if code < 0:
            return ExitStatus(exit_code=None, signal=-code)
        return ExitStatus(exit_code=code, signal=None)

    async def stop(self, grace: float) -> None:
        if self.process.returncode is not None:
            return
        if grace <= 0:  # a crash: nothing gets to clean up
            self._kill_everything()
            await self._leader_exit()
            return
        _killpg(self.pgid, signal.SIGTERM)
        try:
            await asyncio.wait_for(self._leader_exit(), timeout=grace)
        except TimeoutError:
            self._kill_everything()
            await self._leader_exit()


class ProcessRuntime(Runtime):
    name = "process"
    inherits_environment = True
    builds_environments = True

    async def prepare_image(self, placement: Placement, log: LogStream) -> None:
        image = placement.get("image") or "(none)"
        log.info(f"Image {image}: not used by the process runtime (the command runs on the node)")

    async def start(self, spec: LaunchSpec, sink: LineSink) -> Execution:
        process = await asyncio.create_subprocess_exec(
            "bash", "-c", spec.placement["command"],
            cwd=spec.workdir, env=spec.env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, limit=LINE_LIMIT,
        )
        return ProcessExecution(process, sink)

    async def kill_orphan(self, marker: dict[str, Any], grace: float) -> None:
        pid = int(marker.get("pid", 0))
        if pid <= 0 or not _group_alive(pid):
            return
        leader_start = process_start_time(pid)
        if leader_start is not None and leader_start != marker.get("start_time"):
            return  # the pid now belongs to someone else (so our group is gone: pids of live groups are not reused)
        _killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while _group_alive(pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        _killpg(pid, signal.SIGKILL)


def process_start_time(pid: int) -> int | None:
    """Clock ticks since boot when `pid` started (/proc/PID/stat field 22): tells pid reuse apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its closing one
    return int(stat.rsplit(")", 1)[1].split()[19])


def descendants(root: int) -> set[tuple[int, int | None]]:
    """(pid, start time) of every live descendant of `root`, from /proc's parent links."""
    children: dict[int, list[int]] = {}
    try:
        entries = [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return set()
    starts: dict[int, int] = {}
    for pid in entries:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(pid)
        starts[pid] = int(fields[19])
    found: set[tuple[int, int | None]] = set()
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found.add((pid, starts.get(pid)))
        stack.extend(children.get(pid, []))
    return found


def _group_alive(pgid: int) -> bool:
    """Does the group still have a member that is not a zombie? (An orphan's zombie waits for
    init to reap it, and some container inits never do.)"""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return True
    for entry in entries:
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
