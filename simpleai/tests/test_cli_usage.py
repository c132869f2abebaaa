"""The command line, before anything is sent: flags to job fields, and usage errors (status 2)."""

from __future__ import annotations

import io

import pytest

from simpleai.cli import main, split_command
from simpleai.cli.context import Context
from simpleai.cli.parser import build_parser
from simpleai.cli.run import flags_of
from simpleai.errors import UsageError


def flags(*argv: str) -> dict:
    options, command = split_command(["run", *argv])
    return flags_of(build_parser().parse_args(options), command)


def run_main(*argv: str, env: dict | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Context(env=env or {}, out=out, err=err, stdin=io.StringIO()))
    return code, out.getvalue(), err.getvalue()


def test_each_flag_sets_its_api_field():
    assert flags("--name", "bert", "--server-type", "g3", "--gpus", "8", "--nodes", "2", "--image", "img:1",
                 "--spot", "--no-failover", "--tag", "team=nlp", "--tag", "stage=a") == {
        "name": "bert", "server_type": "g3", "gpus_per_node": 8, "node_count": 2, "image_url": "img:1",
        "learning_type": "spot", "failover_enabled": False,
        "tags": [{"key": "team", "value": "nlp"}, {"key": "stage", "value": "a"}],
    }


def test_flags_not_given_set_nothing():
    assert flags() == {}


@pytest.mark.parametrize(("value", "fields"), [
    ("deepspeed:0.18.9", {"framework": "deepspeed", "framework_version": "0.18.9"}),
    ("pytorch", {"framework": "pytorch", "framework_version": ""}),  # the newest the console offers
])
def test_framework_with_or_without_a_version(value, fields):
    assert flags("--framework", value) == fields


def test_no_spot_is_on_demand_and_failover_is_true():
    assert flags("--no-spot", "--failover") == {"learning_type": "on_demand", "failover_enabled": True}


def test_spot_fallback_after_sets_the_fallback_budget_in_minutes():
    assert flags("--spot", "--spot-fallback-after", "30") == {"learning_type": "spot", "spot_fallback_after_minutes": 30}


def test_everything_after_the_first_double_dash_is_the_command_even_its_own_flags_and_dashes():
    assert flags("--name", "x", "--", "python", "train.py", "--name", "y", "--") == {
        "name": "x", "command": "python train.py --name y --"}


def test_a_job_file_is_the_one_positional_argument():
    options, _ = split_command(["run", "job.yaml", "--follow", "--", "echo", "hi"])
    args = build_parser().parse_args(options)
    assert (args.job_file, args.follow) == ("job.yaml", True)


def test_nothing_after_the_double_dash_is_a_usage_error():
    with pytest.raises(UsageError, match="nothing after `--`"):
        flags("--")


@pytest.mark.parametrize("argv", [
    ["run", "--gpus", "two"], ["frobnicate"], ["status"], [], ["ls", "--limit", "0"], ["logs", "42", "--bogus"],
])
def test_a_wrong_command_line_exits_with_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv, Context(env={}))
    assert exit_.value.code == 2
    assert "usage: simpleai" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["run", "--tag", "team", "--", "echo", "hi"], "simpleai: error: a tag is KEY=VALUE, not 'team'\n"),
    (["status", "42", "--", "echo"], "simpleai: error: only `simpleai run` takes a command after `--`, not `simpleai status`\n"),
    (["tag", "42"], "simpleai: error: give tags to set (K=V) or to remove (--remove K)\n"),
    (["login", "console.example.com", "--token-stdin"],
     "simpleai: error: console.example.com is not a console address: give it as https://console.example.com\n"),
])
def test_usage_errors_of_its_own_are_one_line_and_status_2(argv, message):
    assert run_main(*argv, env={"SIMPLEAI_URL": "http://127.0.0.1:9", "SIMPLEAI_TOKEN": "t"}) == (2, "", message)


def test_a_missing_job_file_is_a_usage_error(tmp_path):
    code, _, err = run_main("run", str(tmp_path / "nope.yaml"), env={"SIMPLEAI_URL": "http://127.0.0.1:9", "SIMPLEAI_TOKEN": "t"})
    assert code == 2 and err.startswith("simpleai: error: cannot read the job file")


def test_without_a_console_it_says_how_to_set_one(tmp_path):
    code, out, err = run_main("ls", env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert (code, out) == (1, "")
    assert err == "simpleai: no console: run `simpleai login URL`, or set SIMPLEAI_URL and SIMPLEAI_TOKEN\n"
