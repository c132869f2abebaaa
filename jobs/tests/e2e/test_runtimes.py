"""Both runtimes on their own, through the same tests: lines, exit codes, stops, leftovers.

The process runtime runs the command on this machine; the Docker runtime runs it in the test
image through Podman's Docker Engine API (`containers.py`). What a job sees must not depend
on which one a node uses.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from nodeagent.logstream import LogStream, Outbox
from nodeagent.runtimes import LaunchSpec, Runtime
from nodeagent.runtimes import docker as docker_runtime
from nodeagent.runtimes.docker import DockerRuntime
from nodeagent.spool import Spool
from nodeagent.tests.agent_support import make_placement, process_runtime

pytestmark = pytest.mark.slow


class Harness:
    """Start one command in a runtime, collect its lines, stop it after a while if asked."""

    def __init__(self, runtime: Runtime, image: str, registry: dict[str, str] | None, tmp_path: Path, host=None) -> None:
        self.runtime, self.image, self.registry, self.tmp_path, self.host = runtime, image, registry, tmp_path, host
        self.count = 0
        self.marker: dict = {}  # the last run's, as the agent writes it down (Execution.marker)

    def run(self, command: str, stop_after: float | None = None, grace: float = 5.0):
        self.count += 1
        workdir = self.tmp_path / f"run-{self.count}"
        (workdir / "output").mkdir(parents=True)
        placement = make_placement(job_id=880000 + self.count, command=command, image=self.image, registry=self.registry)
        lines: list[str] = []

        async def go():
            spool = Spool(self.tmp_path / f"spool-{self.count}")
            await self.runtime.prepare_image(placement, LogStream(Outbox(spool), 1, 1, "master"))
            env = self.runtime.environment(placement, workdir / "output")
            execution = await self.runtime.start(LaunchSpec(placement, workdir, workdir / "output", env), lines.append)
            self.marker = execution.marker
            if stop_after is not None:
                await asyncio.sleep(stop_after)
                await execution.stop(grace)
            try:
                return await execution.wait()
            finally:
                await execution.release()  # as the runner does after the upload

        began = time.monotonic()
        status = asyncio.run(go())
        return status, lines, time.monotonic() - began

    def leftovers(self) -> list[str]:
        """What the last run left on the engine: its node's containers, or the live (not zombie)
        members of its process group."""
        if isinstance(self.runtime, DockerRuntime):
            return self.host.containers(node=self.runtime.node_name)
        return _live_group_members(self.marker["pid"])


@pytest.fixture(params=["process", "docker"])
def harness(request, tmp_path) -> Harness:
    if request.param == "process":  # as `python -m nodeagent` makes it: sandboxed where the tests run as root
        return Harness(process_runtime(), "", None, tmp_path)
    host = request.getfixturevalue("container_host")
    runtime = DockerRuntime(real_gpus=False, client=host.client(), node_name=f"runtime-test-{os.getpid()}")
    return Harness(runtime, host.image, {"username": host.username, "password": host.password}, tmp_path, host)


def test_it_reads_stdout_and_stderr_line_by_line(harness):
    status, lines, _ = harness.run("echo a; echo b >&2; printf 'no newline'")
    assert sorted(lines) == ["a", "b", "no newline"]
    assert (status.exit_code, status.signal) == (0, None)


def test_the_exit_code_is_the_commands(harness):
    status, lines, _ = harness.run("echo failing; exit 3")
    assert lines == ["failing"] and (status.exit_code, status.signal) == (3, None)


def test_a_very_long_line_arrives_in_pieces_and_nothing_is_lost(harness):
    _, lines, _ = harness.run("head -c 150000 /dev/zero | tr '\\0' x; echo; echo after")
    assert "".join(lines[:-1]) == "x" * 150000 and len(lines) > 2
    assert lines[-1] == "after"


def test_a_progress_bar_shows_its_last_drawing(harness):
    _, lines, _ = harness.run("printf ' 10%%\\r 50%%\\r100%%\\r\\n'")
    assert lines == ["100%"]


def test_the_command_runs_in_its_working_directory_with_the_contract(harness):
    _, lines, _ = harness.run('pwd; echo "$OUTPUT_DIR $JOB_NAME $NODE_RANK/$NNODES $MASTER_ADDR:$MASTER_PORT"; touch "$OUTPUT_DIR/made"')
    workdir = harness.tmp_path / f"run-{harness.count}"
    # a container sees its directories at fixed paths, never the node's (container_spec)
    seen = "/simpleai/work" if isinstance(harness.runtime, DockerRuntime) else str(workdir)
    assert lines == [seen, f"{seen}/output demo-job 0/1 127.0.0.1:29500"]
    assert (workdir / "output/made").exists()  # OUTPUT_DIR is the node's directory, uploaded from there


def test_a_stop_ends_the_command_and_everything_it_started_quickly(harness):
    status, _, took = harness.run("sleep 301 & sleep 301; wait", stop_after=1.0)
    assert status.signal == signal.SIGTERM and took < 10  # SIGTERM (not the kill after the grace) ended it
    _assert_no_process("sleep 301")


def test_a_command_that_ignores_sigterm_is_killed_after_the_grace_period(harness):
    status, _, took = harness.run("trap '' TERM; sleep 302 & sleep 302; wait", stop_after=1.0, grace=2.0)
    assert status.signal == signal.SIGKILL and 2.8 <= took < 8
    _assert_no_process("sleep 302")


def test_background_children_do_not_outlive_the_command(harness):
    status, lines, _ = harness.run("sleep 303 & echo parent done")
    assert status.exit_code == 0 and lines == ["parent done"]
    _assert_no_process("sleep 303")


def test_nothing_is_left_on_the_engine(harness):
    status, lines, _ = harness.run("sleep 305 & echo bye")
    assert (status.exit_code, lines) == (0, ["bye"])
    assert harness.marker  # the run was watched: the agent could find it again after a restart
    assert harness.leftovers() == []


def test_a_command_silent_for_longer_than_the_engines_read_timeout_keeps_its_output(container_host, tmp_path, monkeypatch):
    """Seen in CI: DeepSpeed printed nothing for over a minute on a loaded machine; the read
    timeout of the engine calls (60 s) ended the log stream, and every later line of the job was
    lost. The agent's own runtime (built from DOCKER_HOST), with that timeout shortened."""
    monkeypatch.setenv("DOCKER_HOST", container_host.docker_host)
    monkeypatch.setattr(docker_runtime, "API_TIMEOUT_SECONDS", 10)
    runtime = DockerRuntime(real_gpus=False, node_name=f"runtime-test-{os.getpid()}")
    registry = {"username": container_host.username, "password": container_host.password}
    harness = Harness(runtime, container_host.image, registry, tmp_path, container_host)

    status, lines, _ = harness.run("echo before; sleep 13; echo after; echo done >&2")

    assert (status.exit_code, sorted(lines)) == (0, ["after", "before", "done"])


def _live_group_members(pgid: int) -> list[str]:
    """`pid command` of each process in group `pgid` that is not a zombie, from /proc."""
    members = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # it ended while we looked
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(f"{entry} {name}")
    return members


def _assert_no_process(pattern: str) -> None:
    deadline = time.monotonic() + 3
    while subprocess.run(["pgrep", "-f", f"^sleep {pattern.split()[-1]}"], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, f"`{pattern}` outlived its command"
        time.sleep(0.1)



def test_a_new_agent_stops_the_container_an_earlier_agent_process_left(container_host, tmp_path):
    """What supervisor.recover does after an agent restart, with the marker the runner wrote."""
    node = f"orphan-test-{os.getpid()}"
    first = DockerRuntime(real_gpus=False, client=container_host.client(), node_name=node)
    placement = make_placement(job_id=890001, command="trap '' TERM; echo up; sleep 304", image=container_host.image,
                               registry={"username": container_host.username, "password": container_host.password})
    (tmp_path / "output").mkdir()

    async def start():
        await first.prepare_image(placement, LogStream(Outbox(Spool(tmp_path / "spool")), 1, 1, "master"))
        env = first.environment(placement, tmp_path / "output")
        execution = await first.start(LaunchSpec(placement, tmp_path, tmp_path / "output", env), lambda line: None)
        return execution.marker  # the earlier agent is gone now: nobody waits for this container

    marker = asyncio.run(start())
    assert container_host.containers(node=node) == ["simpleai-job890001-attempt1-master"]

    second = DockerRuntime(real_gpus=False, client=container_host.client(), node_name=node)
    began = time.monotonic()
    asyncio.run(second.kill_orphan(marker, grace=1.0))

    assert container_host.containers(node=node) == [] and time.monotonic() - began < 6
    _assert_no_process("sleep 304")
