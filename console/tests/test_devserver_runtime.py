"""`make run` picks the local nodes' runtime: containers where a Docker Engine API answers."""

from __future__ import annotations

import pytest

from console import devserver

NOWHERE = "unix:///nonexistent/docker.sock"


def test_without_an_engine_the_nodes_run_commands_as_processes_and_it_says_so(capsys):
    args, env = devserver._local_runtime({"DOCKER_HOST": NOWHERE})
    assert args == [] and env["DOCKER_HOST"] == NOWHERE
    assert f"Runtime: process (no Docker Engine API answers at {NOWHERE})" in capsys.readouterr().out


def test_where_an_engine_answers_the_nodes_run_containers_on_it(monkeypatch, capsys):
    monkeypatch.setattr("nodeagent.runtimes.docker.find_engine",
                        lambda env: ("unix:///run/podman/podman.sock", "Podman Engine 4.3.1"))
    args, env = devserver._local_runtime({"PATH": "/usr/bin"})
    assert args == ["--runtime", "docker"] and env["DOCKER_HOST"] == "unix:///run/podman/podman.sock"
    assert "Runtime: docker (Podman Engine 4.3.1 at unix:///run/podman/podman.sock)" in capsys.readouterr().out


def test_the_process_runtime_can_be_chosen_even_where_an_engine_answers(monkeypatch, capsys):
    monkeypatch.setattr("nodeagent.runtimes.docker.find_engine", lambda env: pytest.fail("not asked"))
    assert devserver._local_runtime({"LOCAL_NODE_RUNTIME": "process"})[0] == []
    assert "Runtime: process (LOCAL_NODE_RUNTIME=process)" in capsys.readouterr().out


@pytest.mark.parametrize(("value", "says"), [
    ("docker", "LOCAL_NODE_RUNTIME=docker, but no Docker Engine API answers"),
    ("containers", "LOCAL_NODE_RUNTIME must be auto, docker or process"),
])
def test_an_impossible_choice_stops_make_run_with_a_message(value, says):
    with pytest.raises(SystemExit, match=says):
        devserver._local_runtime({"LOCAL_NODE_RUNTIME": value, "DOCKER_HOST": NOWHERE})
