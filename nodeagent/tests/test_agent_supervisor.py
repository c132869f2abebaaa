"""Reconciliation and recovery: what runs on the node follows the desired list, exactly once."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess

from nodeagent.logstream import Outbox
from nodeagent.runner import RunnerContext
from nodeagent.runtimes import ImageError
from nodeagent.runtimes.process import ProcessRuntime, process_start_time
from nodeagent.spool import Spool
from nodeagent.supervisor import Supervisor
from nodeagent.tests.agent_support import make_placement, until
from nodeagent.workdirs import attempt_paths, read_markers, write_marker


def _supervisor(tmp_path, runtime=None) -> Supervisor:
    spool = Spool(tmp_path / "spool")
    return Supervisor(RunnerContext(
        node_name="n1", work_dir=tmp_path, runtime=runtime or ProcessRuntime(real_gpus=False),
        outbox=Outbox(spool), storage=lambda placement: None, default_grace=5.0,
    ))


def _messages(supervisor: Supervisor) -> list[dict]:
    return [json.loads(text) for _, text in supervisor.ctx.outbox.spool.unsent(0)]


def _attempts(supervisor: Supervisor) -> list[dict]:
    return [m for m in _messages(supervisor) if m["type"] == "attempt"]


def test_reconcile_starts_each_placement_once_and_never_again(tmp_path):
    async def scenario():
        supervisor = _supervisor(tmp_path)
        master, worker = make_placement(command="exit 0"), make_placement(role="worker-1", node_rank=1, command="exit 0")
        supervisor.reconcile([master, worker])
        supervisor.reconcile([master, worker])  # the same list again (periodic resync): no second start
        assert len(supervisor.runners) == 2
        await until(lambda: not supervisor.runners, what="both exited")
        supervisor.reconcile([master, worker])
        assert not supervisor.runners
        return supervisor

    supervisor = asyncio.run(scenario())
    assert [m["state"] for m in _attempts(supervisor)].count("preparing") == 2
    assert sorted(m["role"] for m in _attempts(supervisor) if m["state"] == "exited") == ["master", "worker-1"]


def test_a_new_agent_does_not_restart_a_placement_an_earlier_one_ran(tmp_path):
    async def scenario():
        placement = make_placement(command="exit 0")
        first = _supervisor(tmp_path)
        first.reconcile([placement])
        await until(lambda: not first.runners, what="the exit")
        second = _supervisor(tmp_path)  # restarted agent: empty memory, same work dir
        await second.recover()
        second.reconcile([placement])
        assert not second.runners

    asyncio.run(scenario())


def test_recover_stops_an_orphaned_command_and_reports_it(tmp_path):
    placement = make_placement(job_id=9, attempt=2, command="sleep 60")
    paths = attempt_paths(tmp_path, placement)
    paths.create()
    orphan = subprocess.Popen(["sleep", "60"], start_new_session=True)  # left behind by a killed agent
    write_marker(paths.marker, {
        "job_id": 9, "attempt": 2, "role": "master", "state": "running", "runtime": "process", "grace": 2,
        "execution": {"pid": orphan.pid, "start_time": process_start_time(orphan.pid)},
    })

    async def scenario():
        supervisor = _supervisor(tmp_path)
        await supervisor.recover()
        supervisor.reconcile([placement])
        assert not supervisor.runners
        return supervisor

    supervisor = asyncio.run(scenario())
    assert orphan.wait(timeout=5) == -signal.SIGTERM
    [report] = _attempts(supervisor)
    assert (report["job_id"], report["attempt"], report["state"], report["exit_code"]) == (9, 2, "exited", None)
    assert "agent restarted" in report["message"]
    assert [m["state"] for _, m in read_markers(tmp_path)] == ["exited"]


def test_recover_leaves_a_reused_pid_alone(tmp_path):
    placement = make_placement(command="sleep 60")
    paths = attempt_paths(tmp_path, placement)
    paths.create()
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    write_marker(paths.marker, {
        "job_id": 7, "attempt": 1, "role": "master", "state": "running", "runtime": "process",
        "execution": {"pid": bystander.pid, "start_time": -1},  # not the process we started
    })
    try:
        asyncio.run(_supervisor(tmp_path).recover())
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


class BrokenImageRuntime(ProcessRuntime):
    async def prepare_image(self, placement, log):
        raise ImageError("Image x could not be pulled: authentication failed (check the registry username and password): unauthorized")


def test_an_image_failure_is_reported_as_such(tmp_path):
    async def scenario():
        supervisor = _supervisor(tmp_path, BrokenImageRuntime(real_gpus=False))
        supervisor.reconcile([make_placement(command="echo never")])
        await until(lambda: not supervisor.runners, what="the exit")
        return supervisor

    supervisor = asyncio.run(scenario())
    exited = _attempts(supervisor)[-1]
    assert exited["state"] == "exited" and exited["image_error"] is True and exited["exit_code"] is None
    assert "authentication failed" in exited["message"]
    lines = [line[2] for m in _messages(supervisor) if m["type"] == "logs" for line in m["lines"]]
    assert lines[-1].startswith("[ERROR] Image x could not be pulled: authentication failed")


class SlowImageRuntime(ProcessRuntime):
    async def prepare_image(self, placement, log):
        await asyncio.sleep(60)


def test_a_stop_during_preparation_cancels_it(tmp_path):
    async def scenario():
        supervisor = _supervisor(tmp_path, SlowImageRuntime(real_gpus=False))
        supervisor.reconcile([make_placement()])
        await asyncio.sleep(0.1)
        supervisor.reconcile([])
        await asyncio.wait_for(supervisor.shutdown(), timeout=5)
        return supervisor

    supervisor = asyncio.run(scenario())
    exited = _attempts(supervisor)[-1]
    assert exited["state"] == "exited" and exited["exit_code"] is None and exited["signal"] is None
    assert exited["message"].startswith("stopped before the command started")


def test_shutdown_stops_everything_and_reports_it(tmp_path):
    async def scenario():
        supervisor = _supervisor(tmp_path)
        supervisor.reconcile([make_placement(command="echo up; sleep 60")])
        await until(lambda: any(m["state"] == "running" for m in _attempts(supervisor)), what="running")
        await asyncio.wait_for(supervisor.shutdown(), timeout=5)
        return supervisor

    supervisor = asyncio.run(scenario())
    exited = _attempts(supervisor)[-1]
    assert exited["signal"] == signal.SIGTERM and "shutting down" in exited["message"]
