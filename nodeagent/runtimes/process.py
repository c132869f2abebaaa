"""The process runtime (default): the command runs on the node under `bash -c`.

The image is ignored. Run by root, the agent puts each command into a sandbox of its own
(nodeagent.sandbox: its own Unix user, PID and mount namespaces, cgroup): the launcher's init is
the command's PID 1, and a stop reaches everything it started, as `docker stop` would. An agent
that is not root (`--no-isolation`, a single-user workstation) runs the command as itself in a
session of its own and follows its process tree instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import marshal
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ..fileshare import FileStorageUnavailable
from ..logstream import LogStream
from ..protocol import Placement
from ..sandbox import LAUNCHER, SandboxSettings, probe_project_view
from ..sandbox.files import HOME_NAME
from ..sandbox.jail import Jail, recover, share_of
from .base import LINE_LIMIT, Execution, ExitStatus, LaunchSpec, LineSink, Runtime, pump_lines

STRAY_WAIT = 1.0  # seconds to let pipes drain after bash exits before killing leftovers
EXIT_POLL = 0.05
TREE_POLL = 1.0  # seconds between snapshots of the command's process tree


class ProcessExecution(Execution):
    """A command run as the agent's own user (no sandbox), followed through its process tree."""

    def __init__(self, process: asyncio.subprocess.Process, sink: LineSink, isolation: str = "") -> None:
        self.isolation = isolation
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


class SandboxedExecution(Execution):
    """A command in its sandbox: `process` is the outer launcher (nodeagent/sandbox/launch.py),
    which ends as the command ended; the command's PID namespace dies with the launcher's init."""

    def __init__(self, process: asyncio.subprocess.Process, sink: LineSink, jail: Jail) -> None:
        self.process, self.jail = process, jail
        self.isolation = jail.describe()
        self.marker = {"pid": process.pid, "start_time": process_start_time(process.pid), "sandbox": jail.marker()}
        self.sink = sink
        self._readers: list[asyncio.Task[None]] = []
        self._finished = False

    def follow_output(self) -> None:
        """Start handing the command's lines to the sink (after the runner's Isolation line); once."""
        if self._readers:
            return
        assert self.process.stdout is not None and self.process.stderr is not None
        self._readers = [
            asyncio.create_task(pump_lines(self.process.stdout, self.sink)),
            asyncio.create_task(pump_lines(self.process.stderr, self.sink)),
        ]

    async def _launcher_exit(self) -> int:
        while self.process.returncode is None:  # not process.wait(): see ProcessExecution._leader_exit
            await asyncio.sleep(EXIT_POLL)
        return self.process.returncode

    def _kill_everything(self) -> None:
        self.jail.kill()  # the cgroup: everything at once, nothing forks meanwhile
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGKILL)  # its init follows (PR_SET_PDEATHSIG), and the namespace

    async def wait(self) -> ExitStatus:
        code = await self._launcher_exit()
        self.follow_output()
        # the namespace is gone with the init: what holds the pipes still is outside it (a
        # descriptor passed on to another process), and is not waited for long
        _, pending = await asyncio.wait(self._readers, timeout=STRAY_WAIT)
        for task in pending:
            task.cancel()
        if not self._finished:
            self._finished = True
            await asyncio.to_thread(self.jail.finish_command)
            usage = self.jail.usage.describe() if self.jail.usage else ""
            self.resources = usage
        if code < 0:
            return ExitStatus(exit_code=None, signal=-code)
        return ExitStatus(exit_code=code, signal=None)

    async def stop(self, grace: float) -> None:
        if self.process.returncode is not None:
            return
        if grace <= 0:  # a crash: nothing gets to clean up
            self._kill_everything()
            await self._launcher_exit()
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGTERM)  # the init passes it to every process of the namespace
        try:
            await asyncio.wait_for(self._launcher_exit(), timeout=grace)
        except TimeoutError:
            self._kill_everything()
            await self._launcher_exit()

    async def release(self) -> None:
        await asyncio.to_thread(self.jail.leave)


class ProcessRuntime(Runtime):
    name = "process"
    inherits_environment = True
    builds_environments = True
    installs_requirements = True

    def __init__(self, real_gpus: bool, sandbox: SandboxSettings | None = None,
                 unconfined: str = "the agent runs without isolation") -> None:
        """`sandbox`: how placements are isolated (the agent runs as root); None: they run as the
        agent's own user, and their log says why (`unconfined`)."""
        super().__init__(real_gpus)
        self.sandbox, self.unconfined = sandbox, unconfined
        self._lays_projects: bool | None = None  # probed once, on the first project

    def lays_projects(self, work_dir: Path) -> bool:
        """Under the sandbox where the kernel can (nodeagent.sandbox.project_view; probed once)."""
        if self.sandbox is not None and self._lays_projects is None:
            self._lays_projects = probe_project_view(work_dir / "projects" / ".probe")
        return bool(self._lays_projects)

    def placement_problem(self, placement: Placement, workdir: Path, output_dir: Path) -> str:
        if not placement.get("mount_path"):
            return ""
        if self.sandbox is None:  # a bind mount in the job's own mount namespace needs root
            return (f"File Storage cannot be mounted at {placement['mount_path']} on this node: its agent runs every "
                    f"job as its own user, without a sandbox ({self.unconfined})")
        try:
            share_of(self.sandbox, placement, workdir, output_dir, {})
        except FileStorageUnavailable as exc:
            return str(exc)
        return ""

    async def run_build(self, placement: Placement, directory: Path, command: str, env: dict[str, str],
                        sink: LineSink) -> int:
        """The build runs as a command of the placement would: in a sandbox of its own, as a job user
        of the placement's tenant (its `directory` handed to that user meanwhile, and back after),
        without the File Storage share; without a sandbox as the agent's own user."""
        output = directory / ".build-output"
        output.mkdir(mode=0o700, exist_ok=True)
        build: Placement = {**placement, "command": command, "mount_path": ""}
        execution = await self.start(LaunchSpec(build, directory, output, env), sink)
        try:
            if isinstance(execution, SandboxedExecution):
                execution.follow_output()
            status = await execution.wait()
        except asyncio.CancelledError:  # the job was stopped meanwhile: so is its build
            await execution.stop(0)
            raise
        finally:
            await execution.release()
        return status.exit_code if status.exit_code is not None else 128 + (status.signal or 0)

    async def prepare_image(self, placement: Placement, log: LogStream) -> None:
        image = placement.get("image") or "(none)"
        log.info(f"Image {image}: not used by the process runtime (the command runs on the node)")

    async def start(self, spec: LaunchSpec, sink: LineSink) -> Execution:
        if self.sandbox is not None:
            return await self._start_sandboxed(spec, sink, self.sandbox)
        home = spec.workdir / HOME_NAME
        home.mkdir(mode=0o700, exist_ok=True)
        user = _own_user_name()
        env = {**spec.env, "HOME": str(home), "USER": user, "LOGNAME": user}
        process = await asyncio.create_subprocess_exec(
            "bash", "-c", spec.placement["command"],
            cwd=spec.workdir, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, limit=LINE_LIMIT,
        )
        return ProcessExecution(process, sink, isolation=f"none ({self.unconfined})")

    async def _start_sandboxed(self, spec: LaunchSpec, sink: LineSink, sandbox: SandboxSettings) -> Execution:
        jail = await asyncio.to_thread(Jail.enter, sandbox, spec.placement, spec.workdir, spec.output_dir, spec.env,
                                       self.real_gpus, spec.project)
        report, report_end = os.pipe()  # the launcher says "started", or why not, then closes it
        try:
            launch = marshal.dumps({**jail.launch_spec(spec.placement["command"], spec.env), "report_fd": report_end})
            # -I -S: nothing of the environment or of site-packages runs as root before the drop
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-I", "-S", str(LAUNCHER), cwd="/", env={}, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
                limit=LINE_LIMIT, pass_fds=(report_end,),
            )
        except BaseException:
            os.close(report)
            await asyncio.to_thread(_abandon, jail)
            raise
        finally:
            os.close(report_end)
        assert process.stdin is not None
        execution = SandboxedExecution(process, sink, jail)
        with contextlib.suppress(ConnectionError):  # a launcher that died at once says so below
            process.stdin.write(launch)
            await process.stdin.drain()
        process.stdin.close()
        # the command's output waits in its pipes meanwhile: its lines follow the Isolation line
        said = await asyncio.to_thread(_read_to_end, report)
        if said != "started":
            await execution.wait()
            await execution.release()
            raise CommandNotStarted(said.removeprefix("error ").strip() or "the sandbox's launcher ended without saying why")
        loop = asyncio.get_running_loop()
        loop.call_soon(execution.follow_output)  # after the runner's next lines (no await between)
        return execution

    async def kill_orphan(self, marker: dict[str, Any], grace: float) -> None:
        if isinstance(marker.get("sandbox"), dict):
            await self._kill_sandboxed_orphan(marker, grace)
            return
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

    async def _kill_sandboxed_orphan(self, marker: dict[str, Any], grace: float) -> None:
        """The launcher an earlier agent started: SIGTERM (its init passes it on), the grace, then
        SIGKILL through the cgroup and the launcher; then its cgroup and files are cleared."""
        pid = int(marker.get("pid", 0))
        started = process_start_time(pid) if pid > 0 else None
        if started is not None and started == marker.get("start_time"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while process_start_time(pid) == started and _alive(pid) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        await asyncio.to_thread(recover, marker["sandbox"], self.sandbox or SandboxSettings())


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


def _alive(pid: int) -> bool:
    """Is `pid` a process that has not ended (a zombie waiting for its reaper has)?"""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] != "Z"


class CommandNotStarted(Exception):
    """The launcher could not put the command into its sandbox, or bash could not be run."""


def _read_to_end(descriptor: int) -> str:
    with os.fdopen(descriptor, "rb") as pipe:
        return pipe.read().decode(errors="replace")


def _abandon(jail: Jail) -> None:
    jail.finish_command()
    jail.leave()


def _own_user_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.geteuid())


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
