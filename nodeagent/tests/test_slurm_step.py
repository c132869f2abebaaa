"""The node-side step launcher's own logic: redeeming the launch key, the GPUs Slurm gave, exit codes."""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from nodeagent import slurm_run, slurm_step
from nodeagent.logstream import Outbox
from nodeagent.runner import RunnerContext
from nodeagent.runtimes.process import ProcessRuntime
from nodeagent.spool import Spool

ENV = {
    "SIMPLEAI_CONSOLE_URL": "http://console.test", "SIMPLEAI_JOB_ID": "12", "SIMPLEAI_LAUNCH_KEY": "key-1",
    "SLURM_JOB_ID": "345", "SLURM_RESTART_COUNT": "2", "SLURM_JOB_NODELIST": "n[1-2]",
}


class Console:
    """A tiny HTTP server that answers the redemption with the statuses a test queues."""

    def __init__(self, answers: list[tuple[int, dict]]) -> None:
        self.answers, self.requests = answers, []
        console = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                console.requests.append((self.path, self.headers["Authorization"], body))
                status, answer = console.answers.pop(0)
                self.send_response(status)
                self.end_headers()
                self.wfile.write(json.dumps(answer).encode())

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def console():
    servers = []

    def start(*answers: tuple[int, dict]) -> Console:
        servers.append(Console(list(answers)))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_the_batch_step_redeems_the_launch_key_for_this_runs_token(console):
    server = console((201, {"token": "run-token", "attempt": 3}))
    token = slurm_step.redeem({**ENV, "SIMPLEAI_CONSOLE_URL": server.url}, delays=())
    assert token == "run-token"
    [(path, authorization, body)] = server.requests
    assert path == "/api/v1/slurm/runs/" and authorization == "Bearer key-1"
    assert body == {"job_id": 12, "slurm_job_id": 345, "restart_count": 2, "nodelist": "n[1-2]"}


def test_a_console_that_is_restarting_is_asked_again(console):
    server = console((502, {}), (201, {"token": "t", "attempt": 1}))
    assert slurm_step.redeem({**ENV, "SIMPLEAI_CONSOLE_URL": server.url}, delays=(0.01,)) == "t"
    assert len(server.requests) == 2


def test_a_refusal_is_final_and_says_why(console):
    server = console((409, {"error": "this run is not wanted"}))
    with pytest.raises(slurm_step.UsageError, match=r"refused this run \(HTTP 409\).*not wanted"):
        slurm_step.redeem({**ENV, "SIMPLEAI_CONSOLE_URL": server.url}, delays=(0.01,))
    assert len(server.requests) == 1


def test_an_unreachable_console_gives_up_after_the_last_try():
    with pytest.raises(slurm_step.UsageError, match="did not answer after 3 tries"):
        slurm_step.redeem({**ENV, "SIMPLEAI_CONSOLE_URL": "http://127.0.0.1:9"}, delays=(0.01, 0.01))


@pytest.mark.parametrize("missing", ["SIMPLEAI_LAUNCH_KEY", "SLURM_JOB_ID", "SIMPLEAI_CONSOLE_URL"])
def test_outside_a_slurm_job_the_launcher_says_what_is_missing(missing):
    environ = {k: v for k, v in ENV.items() if k != missing}
    with pytest.raises(slurm_step.UsageError, match=f"{missing} is not set"):
        slurm_step.redeem(environ, delays=())


@pytest.mark.parametrize(("environ", "indices"), [
    ({"SLURM_STEP_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": "0,1"}, [2, 3]),
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, [0, 1]),
    ({"CUDA_VISIBLE_DEVICES": "GPU-uuid-1"}, []),
    ({}, []),
])
def test_it_uses_the_gpus_slurm_gave_this_step(environ, indices):
    assert slurm_run.allocated_gpus(environ) == indices


@pytest.mark.parametrize(("report", "told_to_stop", "code"), [
    ({"exit_code": 0, "signal": None}, False, 0),
    ({"exit_code": 3, "signal": None}, False, 3),
    ({"exit_code": None, "signal": 9}, False, 137),
    # stopped because Slurm said so: the job's state (CANCELLED, PREEMPTED, TIMEOUT) tells why
    ({"exit_code": None, "signal": 15}, True, 0),
    ({"exit_code": None, "signal": None}, False, 1),
    (None, False, 1),
])
def test_the_launchers_exit_code_is_the_commands(report, told_to_stop, code):
    assert slurm_run.exit_code(report, told_to_stop) == code


def test_the_websocket_address_follows_the_consoles_scheme():
    assert slurm_run.step_ws_url("http://console:8000") == "ws://console:8000/ws/slurm-step/"
    assert slurm_run.step_ws_url("https://console.example/base") == "wss://console.example/base/ws/slurm-step/"


def test_the_commands_do_not_inherit_the_launchers_own_pythonpath():
    environ = {"PYTHONPATH": f"{slurm_step.PACKAGE_ROOT}:/opt/site", "HOME": "/root"}
    assert slurm_step._without_own_path(environ) == {"PYTHONPATH": "/opt/site", "HOME": "/root"}
    assert "PYTHONPATH" not in slurm_step._without_own_path({"PYTHONPATH": slurm_step.PACKAGE_ROOT})


def _supervisor(tmp_path: Path, indices: list[int]) -> slurm_run.StepSupervisor:
    ctx = RunnerContext(node_name="n1", work_dir=tmp_path, runtime=ProcessRuntime(False), outbox=Outbox(Spool(tmp_path / "spool")),
                        storage=lambda placement: None, default_grace=5)
    supervisor = slurm_run.StepSupervisor(ctx, indices, grace=5)
    supervisor._start = lambda key, placement: supervisor.started.append(placement)  # type: ignore[method-assign]
    supervisor.started = []  # type: ignore[attr-defined]
    return supervisor


def test_the_placement_runs_on_slurms_gpus_within_the_launchers_grace(tmp_path):
    supervisor = _supervisor(tmp_path, [4, 5])
    supervisor.reconcile([{"job_id": 1, "attempt": 1, "role": "master", "gpu_indices": [0, 1], "stop_grace_seconds": 30}])
    [placement] = supervisor.started  # type: ignore[attr-defined]
    assert placement["gpu_indices"] == [4, 5] and placement["stop_grace_seconds"] == 5


def test_after_slurm_said_stop_nothing_starts(tmp_path):
    supervisor = _supervisor(tmp_path, [])
    supervisor.stop_all("Slurm is stopping this job step (SIGTERM)")
    supervisor.reconcile([{"job_id": 1, "attempt": 1, "role": "master", "gpu_indices": [0]}])
    assert supervisor.started == []  # type: ignore[attr-defined]


def test_run_without_a_token_explains_itself(capsys, monkeypatch):
    """The batch step could not redeem the key: its token pipe closes empty, every launcher stops."""
    monkeypatch.delenv("SIMPLEAI_ATTEMPT_TOKEN", raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert slurm_step.main(["run", "--work-dir", "/tmp/x"]) == 1
    assert "no token for this run on standard input" in capsys.readouterr().err


def test_the_token_is_the_first_line_the_batch_step_sends():
    assert slurm_step.read_token(io.StringIO("run-token\n")) == "run-token"
    assert slurm_step.read_token(io.StringIO("")) == ""


def test_a_step_runs_in_the_agent_s_sandbox_with_slurm_s_variables_and_nothing_else(monkeypatch):
    """Steps of different tenants never share a Unix user or a writable directory (run as root by
    slurmd); the launch key and the run's token of the batch environment never reach the command."""
    import os

    from nodeagent.tests.agent_support import make_placement

    for name, value in {"SLURM_JOB_ID": "41", "SLURMD_NODENAME": "n1", "SIMPLEAI_LAUNCH_KEY": "key",
                        "SIMPLEAI_ATTEMPT_TOKEN": "token"}.items():
        monkeypatch.setenv(name, value)
    runtime = slurm_run.step_runtime("n1")
    env = runtime.environment(make_placement(), Path("/o"))
    assert (env["SLURM_JOB_ID"], env["SLURMD_NODENAME"]) == ("41", "n1") and not {"SIMPLEAI_LAUNCH_KEY", "SIMPLEAI_ATTEMPT_TOKEN"} & env.keys()
    if os.geteuid() == 0:
        assert runtime.sandbox is not None
        assert runtime.sandbox.cgroup_support().version == 0  # Slurm's cgroup stays the step's
