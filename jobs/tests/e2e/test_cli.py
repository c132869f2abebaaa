"""The `simpleai` command, driven as a user drives it (a subprocess: `python -m simpleai …`),
against a real console (daphne, Celery) and a node agent with simulated GPUs running the jobs.

Each test starts from a user with an API token and an empty config directory; the command runs
outside the checkout (only the package on its path), as on a laptop.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from rest_framework.authtoken.models import Token

from jobs.models import TrainingJob

from .helpers import wait_for_status
from .stack import ROOT, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

IMAGE = "127.0.0.1:5055/team/trainer:1"  # what the process runtime is given (it runs no image)
STEPS = 'for i in $(seq 1 {n}); do echo "step $i"; sleep {pause}; done'
# a loss a second apart: each its own point of the finest period `simpleai metrics` asks for
METRICS = ("import json, time\nfor step in range(1, 6):\n"
           "    print('SIMPLEAI_METRIC ' + json.dumps({'step': step, 'loss': 1.0 / step}), flush=True)\n"
           "    time.sleep(1.1)\n"
           "print('hello from the cli')")


class Cli:
    """`python -m simpleai` as Alice on her laptop: her own config directory, no SIMPLEAI_* set."""

    def __init__(self, url: str, token: str, home: Path) -> None:
        self.url, self.token, self.home = url, token, home
        self.env = {name: value for name, value in os.environ.items() if not name.startswith("SIMPLEAI_")}
        self.env.update(XDG_CONFIG_HOME=str(home / "config"), PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")

    def args(self, *argv: str) -> list[str]:
        return [sys.executable, "-m", "simpleai", *argv]

    def __call__(self, *argv: str, stdin: str | None = None, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
        return subprocess.run(self.args(*argv), cwd=self.home, env={**self.env, **(env or {})}, input=stdin,
                              capture_output=True, text=True, timeout=timeout)

    def login(self) -> None:
        done = self("login", self.url, "--token-stdin", stdin=self.token + "\n")
        assert done.returncode == 0, done.stderr

    def start(self, *argv: str) -> int:
        """`simpleai run …` without --follow: the new job's id."""
        done = self("run", "--image", IMAGE, *argv)
        assert done.returncode == 0, done.stderr
        return int(done.stdout)


@pytest.fixture
def cli(alice, stack, start_nodes, tmp_path) -> Cli:
    """Alice's command, logged in to the stack's console, with one node to run her jobs."""
    start_nodes("cli-node")
    runner = Cli(stack.url, Token.objects.create(user=alice).key, tmp_path)
    runner.login()
    return runner


def test_login_stores_the_token_privately_and_run_follow_exits_0_when_the_job_completes(cli, alice):
    config = cli.home / "config" / "simpleai" / "config"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600 and cli.token in config.read_text()

    done = cli("run", "--name", "cli-hello", "--image", IMAGE, "--tag", "team=nlp", "--follow", "--", "python", "-c", METRICS)

    assert done.returncode == 0, done.stderr
    job = TrainingJob.objects.get(owner=alice, name="cli-hello")
    assert done.stdout.splitlines()[0] == str(job.pk)
    assert "hello from the cli" in done.stdout.splitlines()
    assert f"simpleai: job {job.pk} (cli-hello) Completed" in done.stderr.splitlines()[-1]
    # defaults: 1 GPU of the smallest type that offers it, 1 node, PyTorch's newest version
    assert (job.server_type.name, job.gpus_per_node, job.node_count, job.framework, job.framework_version) == (
        "g2", 1, 1, "pytorch", "2.13.0")

    listed = cli("ls", "--json")
    assert [(j["name"], j["status"]) for j in yaml.safe_load(listed.stdout)] == [("cli-hello", "Completed")]
    shown = cli("status", "cli-hello")
    assert "Status     Completed" in shown.stdout and "Tags       team=nlp" in shown.stdout
    metrics = wait_until(lambda: (m := cli("metrics", str(job.pk))).returncode == 0 and "TrainingLoss" in m.stdout and m,
                         timeout=60, message="the job's loss in `simpleai metrics`")
    [loss] = [line.split() for line in metrics.stdout.splitlines() if line.startswith("TrainingLoss")]
    assert (loss[1], loss[2], loss[4]) == ("master", "0.2", "1")  # series, last, (min,) max


def test_run_follow_exits_1_when_the_job_fails(cli):
    done = cli("run", "--name", "cli-fails", "--image", IMAGE, "--follow", "--", "echo boom; exit 3")
    assert done.returncode == 1
    assert "boom" in done.stdout.splitlines()
    assert "(cli-fails) Failed: The command exited with code 3" in done.stderr


def test_logs_follow_rides_out_a_console_restart_and_prints_each_line_once(cli, stack):
    job_id = cli.start("--name", "cli-steps", "--", STEPS.format(n=30, pause=0.5))
    follower = subprocess.Popen(cli.args("logs", "cli-steps", "-f"), cwd=cli.home, env=cli.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = Collected(follower.stdout), Collected(follower.stderr)
    try:
        wait_until(lambda: "step 3" in out.lines, timeout=90, message="step 3 in the followed logs")
        stack.stop_console()
        try:
            wait_until(lambda: any("lost the console" in line for line in err.lines), timeout=30, message="the CLI to notice")
        finally:
            stack.start_console()
        assert follower.wait(timeout=120) == 0, err.lines
    finally:
        follower.kill()
    out.join(), err.join()
    assert [line for line in out.lines if line.startswith("step ")] == [f"step {i}" for i in range(1, 31)]
    assert any("the console answers again" in line for line in err.lines)
    assert err.lines[-1].startswith(f"simpleai: job {job_id} (cli-steps) Completed")


def test_tags_are_set_and_an_exported_job_runs_again_as_it_was(cli, alice, tmp_path):
    first = cli("run", "--name", "cli-original", "--image", IMAGE, "--tag", "team=nlp", "--follow", "--", "echo original")
    assert first.returncode == 0, first.stderr

    tagged = cli("tag", "cli-original", "stage=two")
    exported = cli("export", "cli-original")
    (tmp_path / "job.yaml").write_text(exported.stdout)
    again = cli("run", "job.yaml", "--follow")

    assert tagged.stdout == "stage=two team=nlp\n"  # as the API lists them, by key
    assert again.returncode == 0, again.stderr
    original = TrainingJob.objects.get(owner=alice, name="cli-original")
    copy = TrainingJob.objects.get(pk=int(again.stdout.splitlines()[0]))
    same = ("server_type_id", "gpus_per_node", "memory_gb", "node_count", "shm_size_gb", "framework", "framework_version",
            "learning_type", "failover_enabled", "image_url", "command")
    assert {f: getattr(copy, f) for f in same} == {f: getattr(original, f) for f in same}
    assert list(copy.tags.values_list("key", "value")) == list(original.tags.values_list("key", "value"))
    assert copy.name != original.name and "original" in again.stdout.splitlines()


def test_cancel_stops_a_running_job_and_rm_deletes_it(cli, alice):
    job_id = cli.start("--name", "cli-long", "--", "sleep 307")
    wait_for_status(job_id, "Running")

    cancelled = cli("cancel", "cli-long")
    assert cancelled.returncode == 0, cancelled.stderr
    assert wait_for_status(job_id, "Stopped").status_reason == "Stopped by the user"
    again = cli("cancel", str(job_id))
    assert (again.returncode, again.stderr) == (
        1, "simpleai: This Training Job is Stopped: only a job that waits or runs can be stopped.\n")

    removed = cli("rm", "cli-long")
    assert removed.returncode == 0, removed.stderr
    wait_until(lambda: not TrainingJob.objects.filter(pk=job_id).exists(), timeout=60, message="the job to go")
    gone = cli("status", "cli-long")
    assert (gone.returncode, gone.stderr) == (1, "simpleai: you have no job with the id or name 'cli-long'\n")


def test_a_refused_job_prints_the_apis_message_and_a_dry_run_its_defaults(cli, alice):
    refused = cli("run", "--name", "ab", "--image", IMAGE, "--", "echo hi")
    checked = cli("run", "--dry-run", "--name", "cli-dry", "--image", IMAGE, "--gpus", "2", "--", "echo hi")

    assert (refused.returncode, refused.stdout, refused.stderr) == (1, "", "simpleai: name: Enter 3 to 63 characters.\n")
    assert checked.returncode == 0, checked.stderr
    draft = yaml.safe_load(checked.stdout)
    assert (draft["name"], draft["memory_gb"], draft["framework_version"], draft["server_type"]) == ("cli-dry", 512, "2.13.0", "g2")
    assert not TrainingJob.objects.filter(owner=alice).exists()


def test_a_bad_token_and_an_unreachable_console_are_one_line_each(cli):
    bad = cli("ls", env={"SIMPLEAI_TOKEN": "not-a-token"})
    assert (bad.returncode, bad.stderr) == (
        1, f"simpleai: the console refused the token: get one on your account page ({cli.url}/account/token/)\n")
    closed = cli("ls", env={"SIMPLEAI_URL": "http://127.0.0.1:9"})
    assert closed.returncode == 1
    assert closed.stderr.startswith("simpleai: cannot reach the console at http://127.0.0.1:9: ") and closed.stderr.count("\n") == 1


class Collected(threading.Thread):
    """Reads a pipe's lines as they come (a test waits on them without blocking on the pipe)."""

    def __init__(self, pipe) -> None:
        super().__init__(daemon=True)
        self.pipe, self.lines = pipe, []
        self.start()

    def run(self) -> None:
        for line in self.pipe:
            self.lines.append(line.rstrip("\n"))
