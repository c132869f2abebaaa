"""What the command prints and its exit status for each kind of answer, against a stand-in
console on loopback (real HTTP through the client; no console behind it)."""

from __future__ import annotations

import io
import json
import socket
import stat

import pytest

from simpleai.cli import main
from simpleai.cli.context import Context
from simpleai.config import config_path

from .fake_console import SERVER_TYPES, fake_console, job

JOBS = "/api/v1/training-jobs/"


@pytest.fixture
def console():
    with fake_console() as fake:
        yield fake


def cli(console, *argv: str, stdin: str = "", env: dict | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = {"SIMPLEAI_URL": console.url, "SIMPLEAI_TOKEN": "good", **(env or {})}
    code = main(list(argv), Context(env=env, out=out, err=err, stdin=io.StringIO(stdin)))
    return code, out.getvalue(), err.getvalue()


def test_a_refused_token_is_one_line_pointing_at_the_account_page(console):
    console.on("GET", JOBS, 401, {"detail": "Invalid token."})
    assert cli(console, "ls") == (
        1, "", f"simpleai: the console refused the token: get one on your account page ({console.url}/account/token/)\n")


def test_an_unreachable_console_is_one_line():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out, err = io.StringIO(), io.StringIO()
    code = main(["ls"], Context(env={"SIMPLEAI_URL": f"http://127.0.0.1:{port}", "SIMPLEAI_TOKEN": "t"}, out=out, err=err))
    assert code == 1 and err.getvalue().startswith(f"simpleai: cannot reach the console at http://127.0.0.1:{port}: ")
    assert err.getvalue().count("\n") == 1


def test_a_400_prints_the_apis_field_messages_on_one_line(console):
    console.on("POST", f"{JOBS}validate/", 400, {"name": ["Enter 3 to 63 characters."],
                                                 "gpus_per_node": ["Server type g2 offers 1, 2, 4, 8 GPUs per node."]})
    code, out, err = cli(console, "run", "--name", "ab", "--server-type", "g2", "--", "echo hi")
    assert (code, out) == (1, "")
    assert err == "simpleai: name: Enter 3 to 63 characters.; gpus_per_node: Server type g2 offers 1, 2, 4, 8 GPUs per node.\n"
    assert not [r for r in console.requests if r["path"] == JOBS]  # nothing created


def test_run_checks_then_creates_and_prints_the_id(console):
    console.on("GET", "/api/v1/server-types/", 200, SERVER_TYPES)
    console.on("POST", f"{JOBS}validate/", 200, {"name": "bert"})
    console.on("POST", JOBS, 201, job())
    code, out, err = cli(console, "run", "--name", "bert", "--tag", "a=1", "--", "python", "train.py")
    assert (code, out) == (0, "42\n")
    assert "job 42 (bert) is Pending on g2: 1 GPU × 1 node" in err
    created = console.requests[-1]
    assert created["authorization"] == "Token good"
    assert created["body"] == {"name": "bert", "tags": [{"key": "a", "value": "1"}], "command": "python train.py",
                               "gpus_per_node": 1, "server_type": "g2", "image_url": ""}
    assert console.requests[-2]["body"] == created["body"]  # validated as it was then sent


def test_run_follow_exits_0_when_the_job_completed_and_1_when_it_failed(console):
    console.on("POST", f"{JOBS}validate/", 200, {})
    console.on("POST", JOBS, 201, job())
    console.on("GET", f"{JOBS}42/logs/", 200, {"job": 42, "streams": ["master"], "next": "2.x", "more": False,
                                              "lines": [{"id": 1, "stream": "master", "attempt": 1, "seq": 1, "ts": 0, "text": "hello"}]})
    console.on("GET", f"{JOBS}42/logs/", 200, {"job": 42, "streams": ["master"], "next": "2.x", "more": False, "lines": []})
    console.on("GET", f"{JOBS}42/", 200, job(status="Completed", status_reason="Exited with code 0"))
    code, out, err = cli(console, "run", "--server-type", "g2", "--follow", "--", "echo hello")
    assert (code, out) == (0, "42\nhello\n")
    assert err.endswith("simpleai: job 42 (bert) Completed: Exited with code 0\n")
    console.on("GET", f"{JOBS}42/", 200, job(status="Failed", status_reason="exited with code 3"))
    console.answers[("GET", f"{JOBS}42/")] = console.answers[("GET", f"{JOBS}42/")][-1:]
    assert cli(console, "logs", "42", "-f")[0] == 1


def test_a_job_is_found_by_its_name(console):
    console.on("GET", f"{JOBS}", 200, {"count": 2, "next": None, "results": [job(name="bert-large", id=7), job(name="bert", id=9)]})
    code, out, _ = cli(console, "status", "bert", "--json")
    assert code == 0 and json.loads(out)["id"] == 9
    assert console.requests[-1]["query"] == "name=bert&page=1"


def test_an_unknown_job_is_one_line_and_status_1(console):
    console.on("GET", JOBS, 200, {"count": 0, "next": None, "results": []})
    assert cli(console, "cancel", "404") == (1, "", "simpleai: you have no job with the id or name '404'\n")


def test_cancelling_a_job_that_ended_prints_the_apis_reason(console):
    console.on("GET", f"{JOBS}42/", 200, job(status="Completed"))
    console.on("POST", f"{JOBS}42/stop/", 409, {"detail": "This Training Job is Completed: only a job that waits or runs can be stopped."})
    assert cli(console, "cancel", "42") == (
        1, "", "simpleai: This Training Job is Completed: only a job that waits or runs can be stopped.\n")


def test_ls_json_is_the_apis_jobs_across_pages(console):
    console.on("GET", JOBS, 200, {"count": 3, "next": "p2", "results": [job(id=3), job(id=2)]})
    console.on("GET", JOBS, 200, {"count": 3, "next": None, "results": [job(id=1)]})
    code, out, _ = cli(console, "ls", "--json")
    assert code == 0 and [j["id"] for j in json.loads(out)] == [3, 2, 1]


def test_tag_sets_and_removes_keys_and_keeps_the_others(console):
    console.on("GET", f"{JOBS}42/", 200, job(tags=[{"key": "team", "value": "nlp"}, {"key": "old", "value": "x"}]))
    console.on("PATCH", f"{JOBS}42/", 200, job(tags=[{"key": "team", "value": "cv"}, {"key": "new", "value": "1"}]))
    assert cli(console, "tag", "42", "team=cv", "new=1", "--remove", "old") == (0, "team=cv new=1\n", "")
    assert console.requests[-1]["body"] == {"tags": [{"key": "team", "value": "cv"}, {"key": "new", "value": "1"}]}


def test_a_server_error_is_one_line(console):
    console.on("GET", JOBS, 500, None)
    assert cli(console, "ls") == (1, "", "simpleai: the console answered 500 Internal Server Error\n")


def test_login_checks_the_token_then_stores_it_privately(console, tmp_path):
    console.on("GET", "/api/v1/server-types/", 200, SERVER_TYPES)
    env = {"XDG_CONFIG_HOME": str(tmp_path), "SIMPLEAI_URL": "", "SIMPLEAI_TOKEN": ""}
    code, _, err = cli(console, "login", console.url + "/", "--token-stdin", stdin="s3cret\n", env=env)
    assert code == 0 and "logged in to" in err
    path = config_path(env)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and "s3cret" in path.read_text()
    assert console.requests[-1]["authorization"] == "Token s3cret"


def test_login_with_a_refused_token_stores_nothing(console, tmp_path):
    console.on("GET", "/api/v1/server-types/", 401, {"detail": "Invalid token."})
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    code, _, err = cli(console, "login", console.url, "--token-stdin", stdin="wrong\n", env=env)
    assert code == 1 and "the console refused the token" in err
    assert not config_path(env).exists()


def test_ls_and_server_types_print_tables_for_people(console):
    console.on("GET", JOBS, 200, {"count": 1, "next": None, "results": [job(tags=[{"key": "team", "value": "nlp"}])]})
    console.on("GET", "/api/v1/server-types/", 200, SERVER_TYPES)
    listed = cli(console, "ls")[1].splitlines()
    assert listed[0].split() == ["ID", "NAME", "STATUS", "RESOURCES", "CREATED", "TAGS"]
    assert listed[1].split() == ["42", "bert", "Pending", "g2:", "1", "GPU", "×", "1", "node", "2026-12-04", "18:00:00", "team=nlp"]
    types = cli(console, "server-types")[1].splitlines()
    assert types[2].split()[:5] == ["g2", "NVIDIA", "H100", "SXM", "8"] and "$3.10" in types[2] and "$1.24" in types[2]
