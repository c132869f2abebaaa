"""The Docker runtime without a Docker engine: the arguments it builds, how it pulls and reads
pull errors, how it follows and stops a container, what it removes at agent start.

The same runtime against a real engine (Podman's Docker API and a private registry) is tested
in jobs/tests/e2e/test_containers.py and test_container_pulls.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import requests
from docker import errors

from nodeagent.environment import LAUNCHERS_DIR, VENDOR_DIR
from nodeagent.logstream import LogStream, Outbox
from nodeagent.runtimes import ImageError, LaunchSpec, pulls
from nodeagent.runtimes.docker import DockerExecution, DockerRuntime, build_run_kwargs, find_engine
from nodeagent.runtimes.pulls import PullError, classify, failure_message
from nodeagent.spool import Spool
from nodeagent.tests.agent_support import make_placement

IMAGE = "registry.example.com/team/train:1"


def _spec(tmp_path: Path, **overrides) -> LaunchSpec:
    placement = make_placement(**overrides)
    workdir = tmp_path / "jobs/7/attempt-1/master"
    return LaunchSpec(placement, workdir, workdir / "output", {"JOB_NAME": "demo-job"})


def _api_error(status: int, explanation: str) -> errors.APIError:
    response = requests.Response()
    response.status_code, response.url, response.reason = status, "http+docker://localhost/images/create", "x"
    return errors.APIError("pull", response=response, explanation=explanation)


# -- the container it asks for --------------------------------------------------------------


def test_it_builds_the_container_of_a_placement(tmp_path):
    spec = _spec(tmp_path, gpu_indices=[2, 3], shm_size_gb=64, mount_path="/mnt/experiment", command="torchrun train.py")
    kwargs = build_run_kwargs(spec, real_gpus=True, node_name="gpu-node-3")
    workdir = str(spec.workdir)
    assert kwargs["image"] == IMAGE
    assert kwargs["command"] == ["bash", "-c", "torchrun train.py"]
    assert kwargs["environment"] == {"JOB_NAME": "demo-job"}
    assert kwargs["shm_size"] == "64g"
    assert kwargs["network_mode"] == "host"
    assert kwargs["init"] is True  # the stop signal reaches the command; children are reaped
    assert kwargs["working_dir"] == workdir and kwargs["detach"] is True
    assert kwargs["volumes"] == {
        workdir: {"bind": workdir, "mode": "rw"},
        str(VENDOR_DIR): {"bind": str(VENDOR_DIR), "mode": "ro"},
        str(LAUNCHERS_DIR): {"bind": str(LAUNCHERS_DIR), "mode": "ro"},  # the deepspeed/accelerate wrappers
        "/mnt/experiment": {"bind": "/mnt/experiment", "mode": "rw"},
    }
    assert kwargs["labels"] == {
        "simpleai.node": "gpu-node-3", "simpleai.job": "7", "simpleai.job-name": "demo-job",
        "simpleai.attempt": "1", "simpleai.role": "master",
    }
    assert kwargs["name"] == "simpleai-job7-attempt1-master"
    [request] = kwargs["device_requests"]
    assert request["DeviceIDs"] == ["2", "3"] and request["Capabilities"] == [["gpu"]]
    assert request["Driver"] == "" and request["Count"] == 0  # exactly these GPUs, not "any N"


def test_simulated_gpus_request_no_devices_and_no_shm_means_the_default(tmp_path):
    kwargs = build_run_kwargs(_spec(tmp_path, shm_size_gb=0, mount_path=""), real_gpus=False)
    assert "device_requests" not in kwargs and "shm_size" not in kwargs
    assert len(kwargs["volumes"]) == 3  # working directory, checkpoint library, launcher wrappers


def test_the_environment_is_the_contract_without_the_agents_own(tmp_path, monkeypatch):
    monkeypatch.setenv("NODEAGENT_TOKEN", "agent-secret")
    monkeypatch.setenv("HOME", "/root-of-the-agent")
    runtime = DockerRuntime(real_gpus=True, client=FakeClient(), node_name="n")
    env = runtime.environment(make_placement(gpu_indices=[4, 5]), tmp_path / "out")
    assert env["MASTER_ADDR"] == "127.0.0.1" and env["OUTPUT_DIR"] == str(tmp_path / "out")
    assert env["CHECKPOINT_VENDOR"] == str(VENDOR_DIR)
    # the image brings its own PATH and HOME; the device request renumbers the GPUs from 0
    assert not {"NODEAGENT_TOKEN", "HOME", "PATH", "CUDA_VISIBLE_DEVICES"} & env.keys()


# -- pull errors ----------------------------------------------------------------------------

PODMAN = "initializing source docker://127.0.0.1:5055/team/minbase:{tag}: reading manifest {tag} in 127.0.0.1:5055/team/minbase: "


@pytest.mark.parametrize(("exc", "kind"), [
    (_api_error(401, "unauthorized: authentication required"), pulls.AUTHENTICATION),
    (_api_error(500, "Head \"https://r/v2/team/x/manifests/1\": unauthorized: authentication required"), pulls.AUTHENTICATION),
    (errors.ImageNotFound("unauthorized: authentication required"), pulls.AUTHENTICATION),
    (RuntimeError(PODMAN.format(tag="1") + "unauthorized: authentication required"), pulls.AUTHENTICATION),
    (PullError("?", "pull access denied for team/x, repository does not exist or may require 'docker login'"), "?"),
    (RuntimeError("pull access denied for team/x, repository does not exist or may require 'docker login'"), pulls.AUTHENTICATION),
    (_api_error(500, "Get https://r/v2/: unauthorized: incorrect username or password"), pulls.AUTHENTICATION),
    (errors.ImageNotFound("404 Client Error: Not Found (\"manifest unknown\")"), pulls.NOT_FOUND),
    (_api_error(404, "manifest for team/x:9 not found: manifest unknown: manifest unknown"), pulls.NOT_FOUND),
    (RuntimeError(PODMAN.format(tag="nope") + "manifest unknown: manifest unknown"), pulls.NOT_FOUND),
    (RuntimeError("name unknown: repository name not known to registry"), pulls.NOT_FOUND),
    (_api_error(400, "invalid reference format"), pulls.INVALID_REFERENCE),
    (errors.InvalidRepository("Invalid repository name"), pulls.INVALID_REFERENCE),
    (_api_error(500, "normalizing image: normalizing name for compat API: repository name must be lowercase"), pulls.INVALID_REFERENCE),
    (RuntimeError("initializing source docker://127.0.0.1:5056/team/minbase:1: pinging container registry 127.0.0.1:5056: "
                  "Get \"https://127.0.0.1:5056/v2/\": dial tcp 127.0.0.1:5056: connect: connection refused"), pulls.UNREACHABLE),
    (_api_error(500, "Get \"https://r.example.com/v2/\": dial tcp: lookup r.example.com: no such host"), pulls.UNREACHABLE),
    (_api_error(500, "Get \"https://r/v2/\": net/http: TLS handshake timeout"), pulls.UNREACHABLE),
    (_api_error(503, "received unexpected HTTP status: 503 Service Unavailable"), pulls.UNREACHABLE),
    (_api_error(500, "Get \"https://r/v2/\": http: server gave HTTP response to HTTPS client"), pulls.OTHER),
    (_api_error(500, "Get \"https://r/v2/\": x509: certificate signed by unknown authority"), pulls.OTHER),
    (_api_error(500, "write /var/lib/docker/tmp/x: no space left on device"), pulls.OTHER),
])
def test_pull_errors_are_classified(exc, kind):
    assert classify(exc) == kind


@pytest.mark.parametrize(("kind", "credentials", "says"), [
    (pulls.AUTHENTICATION, True, f"Image pull failed on node-a: authentication failed for {IMAGE}: the registry refused the job's user ID and password"),
    (pulls.AUTHENTICATION, False, f"authentication failed for {IMAGE}: the registry wants a user ID and password, and the job gives none"),
    (pulls.NOT_FOUND, True, f"image not found: {IMAGE} does not exist in its registry (check the repository name and the tag)"),
    (pulls.INVALID_REFERENCE, True, f"invalid image reference {IMAGE}"),
    (pulls.UNREACHABLE, True, f"registry unreachable for {IMAGE} (3 tries)"),
    (pulls.OTHER, True, f"pull failed for {IMAGE}"),
])
def test_a_failed_pull_says_which_failure_and_what_the_engine_said(kind, credentials, says):
    message = failure_message("node-a", IMAGE, PullError(kind, "the engine's words"), credentials, 3)
    assert says in message
    assert message.endswith(". The engine said: the engine's words")


def test_a_failure_message_never_repeats_the_password_and_fits_a_status_reason():
    password = "S3cret-Pass"
    error = PullError(pulls.OTHER, f"login with {password} failed " + "x" * 2000)
    message = failure_message("node-a", IMAGE, error, True, 1, pulls.secret_forms("trainer", password))
    assert password not in message and len(message) <= 480
    assert "login with" not in message  # the end of a long chain is kept, not its start


def test_secret_forms_cover_the_auth_header_encodings():
    forms = pulls.secret_forms("trainer", "pw")
    assert forms[0] == "pw" and "dHJhaW5lcjpwdw==" in forms  # base64("trainer:pw")
    assert pulls.secret_forms("trainer", "") == []


# -- pulling --------------------------------------------------------------------------------


class FakeImage:
    def __init__(self, image_id: str) -> None:
        self.id, self.attrs = image_id, {"Size": 121_000_000}


class FakeImages:
    def __init__(self, present: dict[str, str]) -> None:
        self.present = present

    def get(self, name):
        if name not in self.present:
            raise errors.ImageNotFound(f"No such image: {name}")
        return FakeImage(self.present[name])


class FakeApi:
    """`pull` plays one list of events per call (the last one again when they run out)."""

    def __init__(self, client, *calls):
        self.client, self.scripts, self.calls = client, list(calls) or [[]], []

    def pull(self, repository, tag, stream, decode, auth_config):
        self.calls.append((repository, tag, auth_config))
        events = self.scripts[min(len(self.calls), len(self.scripts)) - 1]
        if isinstance(events, Exception):
            raise events
        yield from events
        if not any("error" in e for e in events):
            self.client.images.present.setdefault(f"{repository}:{tag}", "sha256:" + "ab12" * 16)


class FakeClient:
    def __init__(self, present=(), *calls):
        self.images = FakeImages({name: "sha256:" + "cd34" * 16 for name in present})
        self.api = FakeApi(self, *calls)


def _prepare(tmp_path, client, delays=(0.0, 0.0), **overrides):
    spool = Spool(tmp_path / "spool")
    log = LogStream(Outbox(spool), 7, 1, "master")
    runtime = DockerRuntime(real_gpus=False, client=client, node_name="node-a")
    runtime.pull_retry_delays = delays

    async def go():
        try:
            await runtime.prepare_image(make_placement(**overrides), log)
        finally:
            log.flush()

    lines: list[str] = []
    try:
        asyncio.run(go())
    finally:
        spool.sync()
        lines[:] = [line[2] for _, text in spool.unsent(0) for line in json.loads(text)["lines"]]
    return lines


CREDENTIALS = {"username": "trainer", "password": "Reg-Pass-1"}


def test_a_missing_image_is_pulled_with_the_registry_credentials(tmp_path):
    client = FakeClient()
    lines = _prepare(tmp_path, client, registry=CREDENTIALS)
    assert client.api.calls == [("registry.example.com/team/train", "1", CREDENTIALS)]
    assert lines[0] == f"[INFO] Pulling image {IMAGE} as registry user trainer"
    assert lines[1].startswith(f"[INFO] Pulled image {IMAGE} (id ab12ab12ab12, 121 MB) in ") and lines[1].endswith(" s")


def test_an_image_on_the_node_is_reused_once_the_registry_accepts_the_credentials(tmp_path):
    client = FakeClient({IMAGE}, [{"status": "Already exists"}])
    lines = _prepare(tmp_path, client, registry=CREDENTIALS)
    assert client.api.calls == [("registry.example.com/team/train", "1", CREDENTIALS)]
    assert lines[1].startswith(f"[INFO] Image {IMAGE} already on this node (id cd34cd34cd34): reused, nothing downloaded (registry check ")


def test_an_image_on_the_node_does_not_run_for_a_job_the_registry_refuses(tmp_path):
    """A private image pulled for one user must not run for another who cannot pull it."""
    client = FakeClient({IMAGE}, [{"error": "unauthorized: authentication required"}])
    with pytest.raises(ImageError, match=f"authentication failed for {IMAGE}: the registry wants a user ID and password"):
        _prepare(tmp_path, client)


def test_a_refused_pull_is_an_image_error_that_says_why(tmp_path):
    client = FakeClient((), [{"status": "Pulling"}, {"error": PODMAN.format(tag="1") + "unauthorized: authentication required"}])
    with pytest.raises(ImageError) as raised:
        _prepare(tmp_path, client, registry={"username": "trainer", "password": "wrong"})
    assert str(raised.value).startswith(f"Image pull failed on node-a: authentication failed for {IMAGE}: the registry refused")
    assert len(client.api.calls) == 1  # a refusal is not retried


def test_an_engine_error_before_the_stream_is_classified_too(tmp_path):
    client = FakeClient((), _api_error(404, "manifest for team/x:9 not found: manifest unknown"))
    with pytest.raises(ImageError, match=f"image not found: {IMAGE}"):
        _prepare(tmp_path, client)


UNREACHABLE = [{"error": "pinging container registry r: dial tcp 10.0.0.9:443: connect: connection refused"}]


def test_an_unreachable_registry_is_retried_with_backoff_then_given_up(tmp_path, monkeypatch):
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds):
        slept.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr("nodeagent.runtimes.docker.asyncio.sleep", sleep)
    client = FakeClient((), UNREACHABLE)
    with pytest.raises(ImageError, match=rf"registry unreachable for {IMAGE} \(3 tries\)\. The engine said: .*connection refused"):
        _prepare(tmp_path, client, delays=(2.0, 5.0))
    assert len(client.api.calls) == 3 and slept == [2.0, 5.0]


def test_a_registry_that_comes_back_within_the_retries_is_a_normal_pull(tmp_path):
    client = FakeClient((), UNREACHABLE, [{"status": "Download complete"}])
    lines = _prepare(tmp_path, client)
    assert lines[1].startswith(f"[WARN] Registry unreachable for {IMAGE} (try 1 of 3): ") and lines[1].endswith("trying again in 0 s")
    assert lines[2].startswith(f"[INFO] Pulled image {IMAGE} (id ") and lines[2].endswith(" after 2 tries")


def test_an_unreachable_registry_falls_back_to_the_image_on_the_node(tmp_path):
    client = FakeClient({IMAGE}, UNREACHABLE)
    lines = _prepare(tmp_path, client)
    assert lines[-1] == f"[WARN] Registry unreachable for {IMAGE} (3 tries); using the copy already on this node"


def test_no_line_and_no_error_repeats_the_password(tmp_path):
    password = "Reg-Pass-1"
    client = FakeClient((), [{"error": f"unauthorized: bad credentials for trainer:{password}"}])
    with pytest.raises(ImageError) as raised:
        _prepare(tmp_path, client, registry=CREDENTIALS)
    assert password not in str(raised.value) and "********" in str(raised.value)


def test_latest_is_pulled_like_any_tag(tmp_path):
    client = FakeClient({"team/x:latest"})
    _prepare(tmp_path, client, image="team/x")
    assert client.api.calls == [("team/x", "latest", None)]


def test_a_job_without_an_image_cannot_run_in_a_container(tmp_path):
    with pytest.raises(ImageError, match="the job names no image"):
        _prepare(tmp_path, FakeClient(), image="")


# -- the container while it runs ------------------------------------------------------------


class FakeContainer:
    id = "c0ffee" * 10
    name = "simpleai-job7-attempt1-master"

    def __init__(self, stdout=(), stderr=(), status=0, labels=None):
        self.stdout, self.stderr, self.status = list(stdout), list(stderr), status
        self.labels = labels or {}
        self.removed, self.stopped = False, None

    def logs(self, **kwargs):
        assert kwargs["follow"] and kwargs["stream"] and kwargs["stdout"] != kwargs["stderr"]
        return iter(self.stdout if kwargs["stdout"] else self.stderr)

    def wait(self):
        return {"StatusCode": self.status}

    def stop(self, timeout):
        self.stopped = timeout

    def remove(self, force):
        self.removed = force


def test_an_execution_ships_both_streams_cut_into_lines_and_reports_the_code():
    container = FakeContainer(stdout=[b"hel", b"lo\nwor", b"ld\n", b"tail"], stderr=[b"warn", b"ing\n"], status=3)
    lines = []

    async def go():
        execution = DockerExecution(container, lines.append)
        assert execution.marker == {"container": container.id, "name": container.name}
        return await execution.wait()

    status = asyncio.run(go())
    assert sorted(lines) == ["hello", "tail", "warning", "world"]  # a half line of one stream never joins the other
    assert lines.index("hello") < lines.index("world") < lines.index("tail")
    assert (status.exit_code, status.signal) == (3, None)
    assert container.removed  # after the exit code and the lines


def test_a_stopped_container_reports_the_signal():
    container = FakeContainer(status=143)

    async def go():
        execution = DockerExecution(container, lambda line: None)
        await execution.stop(7.4)
        return await execution.wait()

    status = asyncio.run(go())
    assert (status.exit_code, status.signal) == (None, 15)
    assert container.stopped == 8  # the grace period, rounded up: never shorter


def test_an_exit_code_above_128_of_a_container_nobody_stopped_is_an_exit_code():
    async def go():
        return await DockerExecution(FakeContainer(status=137), lambda line: None).wait()

    status = asyncio.run(go())
    assert (status.exit_code, status.signal) == (137, None)


class FakeContainers:
    def __init__(self, found=(), fail_run=False):
        self.found, self.fail_run, self.by_name, self.list_filters = list(found), fail_run, {}, None

    def list(self, all, ignore_removed, filters):
        self.list_filters = filters
        return [c for c in self.found if c.labels.get("simpleai.node") == filters["label"].split("=", 1)[1]]

    def get(self, name):
        if name not in self.by_name:
            raise errors.NotFound(name)
        return self.by_name[name]

    def run(self, **kwargs):
        created = FakeContainer()
        created.name = kwargs["name"]
        self.by_name[kwargs["name"]] = created
        if self.fail_run:
            raise errors.APIError("start failed: bind source path does not exist: /mnt/nowhere")
        return created


def test_a_container_that_was_created_but_did_not_start_is_removed(tmp_path):
    client = FakeClient()
    client.containers = FakeContainers(fail_run=True)
    runtime = DockerRuntime(real_gpus=False, client=client, node_name="node-a")

    async def go():
        await runtime.start(_spec(tmp_path, mount_path="/mnt/nowhere"), lambda line: None)

    with pytest.raises(errors.APIError, match="bind source path"):
        asyncio.run(go())
    assert client.containers.by_name["simpleai-job7-attempt1-master"].removed


def test_at_start_it_removes_its_nodes_containers_it_did_not_start():
    stray = FakeContainer(labels={"simpleai.node": "node-a", "simpleai.job": "3"})
    stray.name = "simpleai-job3-attempt1-master"
    current = FakeContainer(labels={"simpleai.node": "node-a", "simpleai.job": "7"})
    other_node = FakeContainer(labels={"simpleai.node": "node-b"})
    client = FakeClient()
    client.containers = FakeContainers([stray, current, other_node])
    runtime = DockerRuntime(real_gpus=False, client=client, node_name="node-a")
    runtime._names.add(current.name)  # started by this agent process meanwhile

    removed = asyncio.run(runtime.remove_strays(grace=4))

    assert removed == ["simpleai-job3-attempt1-master"]
    assert client.containers.list_filters == {"label": "simpleai.node=node-a"}
    assert stray.stopped == 4 and stray.removed
    assert not current.removed and not other_node.removed


def test_no_engine_answering_means_no_engine():
    assert find_engine({"DOCKER_HOST": "unix:///nonexistent/docker.sock"}) is None


def test_a_start_without_preparation_pulls_an_image_the_engine_no_longer_has(tmp_path):
    """A warm start skips preparation; the engine must not be left to pull without the credentials."""
    client = FakeClient()
    client.containers = FakeContainers()
    runtime = DockerRuntime(real_gpus=False, client=client, node_name="node-a")
    lines: list[str] = []

    async def go():
        await runtime.start(_spec(tmp_path, registry=CREDENTIALS), lines.append)

    asyncio.run(go())
    assert client.api.calls == [("registry.example.com/team/train", "1", CREDENTIALS)]
    assert lines[0] == f"[INFO] Pulling image {IMAGE} as registry user trainer"
    assert lines[1].startswith(f"[INFO] Pulled image {IMAGE} (id ")


def test_a_start_after_preparation_does_not_pull_again(tmp_path):
    client = FakeClient({IMAGE})
    client.containers = FakeContainers()

    async def go():
        await DockerRuntime(real_gpus=False, client=client, node_name="node-a").start(_spec(tmp_path), lambda line: None)

    asyncio.run(go())
    assert client.api.calls == [] and "simpleai-job7-attempt1-master" in client.containers.by_name


def test_a_long_line_that_arrives_at_once_is_still_cut_into_pieces():
    """Under load several chunks reach the buffer before the pump runs: pieces stay under the limit."""
    from nodeagent.runtimes.base import LINE_LIMIT

    container = FakeContainer(stdout=[b"x" * 150_000 + b"\nafter\n"])
    lines: list[str] = []

    async def go():
        await DockerExecution(container, lines.append).wait()

    asyncio.run(go())
    assert "".join(lines[:-1]) == "x" * 150_000 and lines[-1] == "after"
    assert len(lines) == 4 and max(len(line) for line in lines) <= LINE_LIMIT
