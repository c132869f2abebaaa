"""The Docker runtime without a Docker engine: the arguments it builds, how it reads pull errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import requests
from docker import errors

from nodeagent.environment import VENDOR_DIR
from nodeagent.logstream import LogStream, Outbox
from nodeagent.runtimes import ImageError, LaunchSpec
from nodeagent.runtimes.docker import DockerExecution, DockerRuntime, PullRefused, build_run_kwargs, classify_pull_error
from nodeagent.spool import Spool
from nodeagent.tests.agent_support import make_placement


def _spec(tmp_path: Path, **overrides) -> LaunchSpec:
    placement = make_placement(**overrides)
    workdir = tmp_path / "jobs/7/attempt-1/master"
    return LaunchSpec(placement, workdir, workdir / "output", {"JOB_NAME": "demo-job"})


def _api_error(status: int, explanation: str) -> errors.APIError:
    response = requests.Response()
    response.status_code, response.url, response.reason = status, "http+docker://localhost/images/create", "x"
    return errors.APIError("pull", response=response, explanation=explanation)


def test_it_builds_the_container_of_a_placement(tmp_path):
    spec = _spec(tmp_path, gpu_indices=[2, 3], shm_size_gb=64, mount_path="/mnt/experiment", command="torchrun train.py")
    kwargs = build_run_kwargs(spec, real_gpus=True)
    workdir = str(spec.workdir)
    assert kwargs["image"] == "registry.example.com/team/train:1"
    assert kwargs["command"] == ["bash", "-c", "torchrun train.py"]
    assert kwargs["environment"] == {"JOB_NAME": "demo-job"}
    assert kwargs["shm_size"] == "64g"
    assert kwargs["network_mode"] == "host"
    assert kwargs["working_dir"] == workdir and kwargs["detach"] is True
    assert kwargs["volumes"] == {
        workdir: {"bind": workdir, "mode": "rw"},
        str(VENDOR_DIR): {"bind": str(VENDOR_DIR), "mode": "ro"},
        "/mnt/experiment": {"bind": "/mnt/experiment", "mode": "rw"},
    }
    assert kwargs["labels"] == {
        "simpleai.job": "7", "simpleai.job-name": "demo-job", "simpleai.attempt": "1", "simpleai.role": "master",
    }
    assert kwargs["name"] == "simpleai-job7-attempt1-master"
    [request] = kwargs["device_requests"]
    assert request["DeviceIDs"] == ["2", "3"] and request["Capabilities"] == [["gpu"]]


def test_simulated_gpus_request_no_devices_and_no_shm_means_the_default(tmp_path):
    kwargs = build_run_kwargs(_spec(tmp_path, shm_size_gb=0, mount_path=""), real_gpus=False)
    assert "device_requests" not in kwargs and "shm_size" not in kwargs
    assert len(kwargs["volumes"]) == 2


@pytest.mark.parametrize(("exc", "kind"), [
    (_api_error(401, "unauthorized: authentication required"), "authentication failed"),
    (_api_error(500, "Head \"https://r/v2/team/x/manifests/1\": unauthorized: authentication required"), "authentication failed"),
    (errors.ImageNotFound("unauthorized: authentication required"), "authentication failed"),  # as Podman says it
    (PullRefused("pull access denied for team/x, repository does not exist or may require 'docker login'"), "authentication failed"),
    (errors.ImageNotFound("404 Client Error: Not Found (\"manifest unknown\")"), "not found"),
    (_api_error(404, "manifest for team/x:9 not found: manifest unknown"), "not found"),
    (PullRefused("manifest unknown: manifest unknown"), "not found"),
    (_api_error(400, "invalid reference format"), "invalid reference"),
    (errors.InvalidRepository("Invalid repository name"), "invalid reference"),
    (PullRefused("invalid reference format: repository name must be lowercase"), "invalid reference"),
    (_api_error(500, "connection reset by peer"), "pull failed"),
])
def test_pull_errors_are_classified(exc, kind):
    assert classify_pull_error(exc) == kind


class FakeImages:
    def __init__(self, present: set[str]) -> None:
        self.present = present

    def get(self, name):
        if name not in self.present:
            raise errors.ImageNotFound(f"No such image: {name}")
        return object()


class FakeApi:
    def __init__(self, client, events):
        self.client, self.events, self.calls = client, events, []

    def pull(self, repository, tag, stream, decode, auth_config):
        self.calls.append((repository, tag, auth_config))
        yield from self.events
        if not any("error" in e for e in self.events):
            self.client.images.present.add(f"{repository}:{tag}")


class FakeClient:
    def __init__(self, present=(), events=()):
        self.images = FakeImages(set(present))
        self.api = FakeApi(self, list(events))


def _prepare(tmp_path, client, **overrides):
    spool = Spool(tmp_path / "spool")
    log = LogStream(Outbox(spool), 7, 1, "master")

    async def go():
        try:
            await DockerRuntime(real_gpus=False, client=client).prepare_image(make_placement(**overrides), log)
        finally:
            log.flush()

    try:
        asyncio.run(go())
    finally:
        spool.sync()
    return [line[2] for _, text in spool.unsent(0) for line in json.loads(text)["lines"]]


def test_a_present_image_is_not_pulled(tmp_path):
    client = FakeClient(present={"registry.example.com/team/train:1"})
    assert _prepare(tmp_path, client) == ["[INFO] Image registry.example.com/team/train:1 already present"]
    assert client.api.calls == []


def test_a_missing_image_is_pulled_with_the_registry_credentials(tmp_path):
    client = FakeClient()
    lines = _prepare(tmp_path, client, registry={"username": "trainer", "password": "Reg-Pass-1"})
    assert client.api.calls == [("registry.example.com/team/train", "1", {"username": "trainer", "password": "Reg-Pass-1"})]
    assert lines[0] == "[INFO] Pulling image registry.example.com/team/train:1"
    assert lines[1].startswith("[INFO] Pulled image registry.example.com/team/train:1 (") and lines[1].endswith(" s)")


def test_a_refused_pull_is_an_image_error_that_says_why(tmp_path):
    client = FakeClient(events=[{"status": "Pulling"}, {"error": "unauthorized: authentication required"}])
    with pytest.raises(ImageError, match=r"could not be pulled: authentication failed \(check the registry username and password"):
        _prepare(tmp_path, client, registry={"username": "trainer", "password": "wrong"})


def test_latest_is_always_pulled(tmp_path):
    client = FakeClient(present={"team/x:latest"})
    _prepare(tmp_path, client, image="team/x")
    assert client.api.calls == [("team/x", "latest", None)]


class FakeContainer:
    id = "c0ffee" * 10

    def __init__(self, chunks, status):
        self.chunks, self.status, self.removed, self.stopped = chunks, status, False, None

    def logs(self, **kwargs):
        assert kwargs["follow"] and kwargs["stream"]
        return iter(self.chunks)

    def wait(self):
        return {"StatusCode": self.status}

    def stop(self, timeout):
        self.stopped = timeout

    def remove(self, force):
        self.removed = force


def test_an_execution_ships_lines_cut_across_chunks_and_reports_the_code():
    container = FakeContainer([b"hel", b"lo\nwor", b"ld\n", b"tail"], 3)
    lines = []

    async def go():
        execution = DockerExecution(container, lines.append)
        return await execution.wait()

    status = asyncio.run(go())
    assert lines == ["hello", "world", "tail"]
    assert (status.exit_code, status.signal) == (3, None)
    assert container.removed


def test_a_stopped_container_reports_the_signal():
    container = FakeContainer([], 143)

    async def go():
        execution = DockerExecution(container, lambda line: None)
        await execution.stop(7.4)
        return await execution.wait()

    status = asyncio.run(go())
    assert (status.exit_code, status.signal) == (None, 15)
    assert container.stopped == 7
