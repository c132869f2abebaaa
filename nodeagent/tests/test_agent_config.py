"""The command line."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from nodeagent.config import agent_ws_url, parse_config


def test_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    config = parse_config(["--console", "http://console:8000"], environ={"NODEAGENT_TOKEN": "t"})
    assert config.name == socket.gethostname()
    assert config.work_dir == (tmp_path / ".simpleai-agent" / socket.gethostname()).resolve()
    assert (config.gpus, config.server_type, config.runtime, config.stop_grace, config.address) == ("auto", "g2", "process", 30.0, "127.0.0.1")
    assert config.ws_url == "ws://console:8000/ws/agent/"


def test_every_flag(tmp_path):
    config = parse_config([
        "--console", "https://c.example/base/", "--name", "gpu-1", "--gpus", "simulated:8",
        "--server-type", "g3", "--work-dir", str(tmp_path), "--address", "10.1.2.3", "--runtime", "docker",
        "--stop-grace", "12.5", "--pass-env", "HTTP_PROXY", "--pass-env", "NCCL_*", "--no-isolation",
        "--file-storage-root", str(tmp_path / "shares"), "--job-uids", "3000000-3000099",
    ], environ={"NODEAGENT_TOKEN": "t"})
    assert (config.name, config.gpus, config.server_type, config.address, config.runtime, config.stop_grace) == (
        "gpu-1", "simulated:8", "g3", "10.1.2.3", "docker", 12.5)
    assert (config.pass_env, config.no_isolation) == (("HTTP_PROXY", "NCCL_*"), True)
    assert config.file_storage_root == (tmp_path / "shares").resolve()
    assert config.identities.uids == range(3000000, 3000100)
    assert config.work_dir == Path(tmp_path).resolve()
    assert config.ws_url == "wss://c.example/base/ws/agent/"


def test_the_token_may_come_from_the_environment():
    config = parse_config(["--console", "http://c:1"], environ={"NODEAGENT_TOKEN": "from-env"})
    assert config.token == "from-env"


def test_no_token_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_config(["--console", "http://c:1"], environ={})
    assert exit_info.value.code == 2
    assert "NODEAGENT_TOKEN" in capsys.readouterr().err


def test_a_token_on_the_command_line_is_refused(capsys):
    """Every user of the machine reads a command line in /proc/PID/cmdline."""
    with pytest.raises(SystemExit) as exit_info:
        parse_config(["--console", "http://c:1", "--token", "t"], environ={})
    assert exit_info.value.code == 2
    assert "--token is not accepted: a command line is readable by every user of this machine" in capsys.readouterr().err


def test_the_token_may_come_from_a_file_only_the_agent_reads(tmp_path):
    path = tmp_path / "token"
    path.write_text("from-file\n")
    path.chmod(0o600)
    config = parse_config(["--console", "http://c:1", "--token-file", str(path)], environ={"NODEAGENT_TOKEN": "ignored"})
    assert config.token == "from-file"


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_a_token_file_others_may_read_is_refused(tmp_path, capsys, mode):
    path = tmp_path / "token"
    path.write_text("t")
    path.chmod(mode)
    with pytest.raises(SystemExit):
        parse_config(["--console", "http://c:1", "--token-file", str(path)], environ={})
    assert f"the token file {path} may be read by others" in capsys.readouterr().err


def test_a_missing_token_file_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse_config(["--console", "http://c:1", "--token-file", str(tmp_path / "none")], environ={})
    assert "cannot read the token file" in capsys.readouterr().err


def test_pass_env_takes_names_only(capsys):
    with pytest.raises(SystemExit):
        parse_config(["--console", "http://c:1", "--pass-env", "A=B"], environ={"NODEAGENT_TOKEN": "t"})
    assert "--pass-env takes a variable name" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["simulated:0", "simulated:x", "fake"])
def test_bad_gpu_specs_are_refused(value):
    with pytest.raises(SystemExit):
        parse_config(["--console", "http://c:1", "--gpus", value], environ={"NODEAGENT_TOKEN": "t"})


def test_ws_url_without_a_scheme():
    assert agent_ws_url("localhost:8000") == "ws://localhost:8000/ws/agent/"
    with pytest.raises(ValueError):
        agent_ws_url("ftp://x")


def test_the_process_runtime_will_not_run_jobs_unsandboxed_unless_told(tmp_path, monkeypatch, capsys):
    """An agent that is not root cannot give each job a user of its own: it says so and stops,
    unless --no-isolation says this is a single-user workstation."""
    from nodeagent import __main__ as entry
    from nodeagent import sandbox

    monkeypatch.setattr(sandbox, "unavailable", lambda: "the agent does not run as root")
    monkeypatch.setenv("NODEAGENT_TOKEN", "t")
    code = entry.main(["--console", "http://127.0.0.1:9", "--gpus", "simulated:1", "--work-dir", str(tmp_path)])
    assert code == entry.EXIT_SETUP_FAILED
    err = capsys.readouterr().err
    assert "cannot here: the agent does not run as root" in err and "--no-isolation" in err
