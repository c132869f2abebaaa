"""The process runtime on its own: lines, exit codes, stops, and what a command leaves behind."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from nodeagent.runtimes import LaunchSpec
from nodeagent.runtimes.process import ProcessRuntime
from nodeagent.tests.agent_support import make_placement


def _run(tmp_path, command, stop_after=None, grace=5.0):
    lines: list[str] = []

    async def go():
        spec = LaunchSpec(make_placement(command=command), tmp_path, tmp_path / "output", dict(os.environ))
        execution = await ProcessRuntime(real_gpus=False).start(spec, lines.append)
        if stop_after is not None:
            await asyncio.sleep(stop_after)
            await execution.stop(grace)
        return await execution.wait(), execution

    status, execution = asyncio.run(go())
    return status, lines, execution


def test_it_reads_stdout_and_stderr_line_by_line(tmp_path):
    status, lines, _ = _run(tmp_path, "echo a; echo b >&2; printf 'no newline'")
    assert sorted(lines) == ["a", "b", "no newline"]
    assert (status.exit_code, status.signal) == (0, None)


def test_a_very_long_line_arrives_in_pieces_and_nothing_is_lost(tmp_path):
    status, lines, _ = _run(tmp_path, "head -c 150000 /dev/zero | tr '\\0' x; echo; echo after")
    assert "".join(lines[:-1]) == "x" * 150000 and len(lines) > 2
    assert lines[-1] == "after"


def test_a_progress_bar_shows_its_last_drawing(tmp_path):
    _, lines, _ = _run(tmp_path, "printf ' 10%%\\r 50%%\\r100%%\\r\\n'")
    assert lines == ["100%"]


def test_a_stop_reaches_the_whole_process_group(tmp_path):
    began = time.monotonic()
    status, _, execution = _run(tmp_path, "sleep 60 & sleep 60; wait", stop_after=0.2)
    assert status.signal == signal.SIGTERM and time.monotonic() - began < 5
    _assert_group_gone(execution.pgid)


def test_background_children_do_not_outlive_the_command(tmp_path):
    status, _, execution = _run(tmp_path, "sleep 60 & echo parent done")
    assert status.exit_code == 0
    _assert_group_gone(execution.pgid)


def test_the_command_runs_in_its_working_directory(tmp_path):
    _, lines, _ = _run(tmp_path, "pwd")
    assert lines == [str(tmp_path)]


def _assert_group_gone(pgid: int) -> None:
    deadline = time.monotonic() + 2
    while _live_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _live_members(pgid), f"process group {pgid} still has members"


def _live_members(pgid: int) -> list[int]:
    """Processes of the group that are not zombies (an orphaned child's reaping is init's job)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


def test_stop_also_kills_children_that_left_the_process_group(tmp_path):
    """torchrun starts its workers in sessions of their own; a stop must not orphan them."""
    import asyncio
    import subprocess

    from nodeagent.runtimes.process import ProcessRuntime

    from .agent_support import make_placement

    marker = f"escaped-{tmp_path.name}"
    command = f"setsid sleep 301 {marker} & echo started; sleep 300"

    async def scenario():
        from nodeagent.runtimes import LaunchSpec

        placement = make_placement(command=command)
        runtime = ProcessRuntime(real_gpus=False)
        lines: list[str] = []
        execution = await runtime.start(LaunchSpec(placement, tmp_path, tmp_path / "out", {"PATH": "/usr/bin:/bin"}), lines.append)
        while "started" not in lines:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.2)  # one snapshot of the tree
        await execution.stop(0)
        return await execution.wait()

    status = asyncio.run(scenario())
    assert status.signal == 9
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 1
