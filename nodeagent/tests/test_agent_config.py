"""The command line."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from nodeagent.config import agent_ws_url, parse_config


def test_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    config = parse_config(["--console", "http://console:8000", "--token", "t"], environ={})
    assert config.name == socket.gethostname()
    assert config.work_dir == (tmp_path / ".simpleai-agent" / socket.gethostname()).resolve()
    assert (config.gpus, config.server_type, config.runtime, config.stop_grace, config.address) == ("auto", "g2", "process", 30.0, "127.0.0.1")
    assert config.ws_url == "ws://console:8000/ws/agent/"


def test_every_flag(tmp_path):
    config = parse_config([
        "--console", "https://c.example/base/", "--token", "t", "--name", "gpu-1", "--gpus", "simulated:8",
        "--server-type", "g3", "--work-dir", str(tmp_path), "--address", "10.1.2.3", "--runtime", "docker",
        "--stop-grace", "12.5",
    ], environ={})
    assert (config.name, config.gpus, config.server_type, config.address, config.runtime, config.stop_grace) == (
        "gpu-1", "simulated:8", "g3", "10.1.2.3", "docker", 12.5)
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


@pytest.mark.parametrize("value", ["simulated:0", "simulated:x", "fake"])
def test_bad_gpu_specs_are_refused(value):
    with pytest.raises(SystemExit):
        parse_config(["--console", "http://c:1", "--token", "t", "--gpus", value], environ={})


def test_ws_url_without_a_scheme():
    assert agent_ws_url("localhost:8000") == "ws://localhost:8000/ws/agent/"
    with pytest.raises(ValueError):
        agent_ws_url("ftp://x")
