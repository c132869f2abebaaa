"""The Docker runtime's pulls without an engine: how it reads pull errors, when it pulls with the
job's registry credentials, retries an unreachable registry or reuses the image on the node. The
same against a real registry: jobs/tests/e2e/test_container_pulls.py.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from docker import errors

from nodeagent.logstream import LogStream, Outbox
from nodeagent.runtimes import ImageError, pulls
from nodeagent.runtimes.docker import DockerRuntime
from nodeagent.runtimes.pulls import PullError, classify, failure_message
from nodeagent.spool import Spool
from nodeagent.tests.agent_support import make_placement
from nodeagent.tests.docker_fakes import (
    CREDENTIALS,
    IMAGE,
    FakeClient,
    api_error,
)

# -- pull errors ----------------------------------------------------------------------------

PODMAN = "initializing source docker://127.0.0.1:5055/team/minbase:{tag}: reading manifest {tag} in 127.0.0.1:5055/team/minbase: "


@pytest.mark.parametrize(("exc", "kind"), [
    (api_error(401, "unauthorized: authentication required"), pulls.AUTHENTICATION),
    (api_error(500, "Head \"https://r/v2/team/x/manifests/1\": unauthorized: authentication required"), pulls.AUTHENTICATION),
    (errors.ImageNotFound("unauthorized: authentication required"), pulls.AUTHENTICATION),
    (RuntimeError(PODMAN.format(tag="1") + "unauthorized: authentication required"), pulls.AUTHENTICATION),
    (PullError("?", "pull access denied for team/x, repository does not exist or may require 'docker login'"), "?"),
    (RuntimeError("pull access denied for team/x, repository does not exist or may require 'docker login'"), pulls.AUTHENTICATION),
    (api_error(500, "Get https://r/v2/: unauthorized: incorrect username or password"), pulls.AUTHENTICATION),
    (errors.ImageNotFound("404 Client Error: Not Found (\"manifest unknown\")"), pulls.NOT_FOUND),
    (api_error(404, "manifest for team/x:9 not found: manifest unknown: manifest unknown"), pulls.NOT_FOUND),
    (RuntimeError(PODMAN.format(tag="nope") + "manifest unknown: manifest unknown"), pulls.NOT_FOUND),
    (RuntimeError("name unknown: repository name not known to registry"), pulls.NOT_FOUND),
    (api_error(400, "invalid reference format"), pulls.INVALID_REFERENCE),
    (errors.InvalidRepository("Invalid repository name"), pulls.INVALID_REFERENCE),
    (api_error(500, "normalizing image: normalizing name for compat API: repository name must be lowercase"), pulls.INVALID_REFERENCE),
    (RuntimeError("initializing source docker://127.0.0.1:5056/team/minbase:1: pinging container registry 127.0.0.1:5056: "
                  "Get \"https://127.0.0.1:5056/v2/\": dial tcp 127.0.0.1:5056: connect: connection refused"), pulls.UNREACHABLE),
    (api_error(500, "Get \"https://r.example.com/v2/\": dial tcp: lookup r.example.com: no such host"), pulls.UNREACHABLE),
    (api_error(500, "Get \"https://r/v2/\": net/http: TLS handshake timeout"), pulls.UNREACHABLE),
    (api_error(503, "received unexpected HTTP status: 503 Service Unavailable"), pulls.UNREACHABLE),
    (api_error(500, "Get \"https://r/v2/\": http: server gave HTTP response to HTTPS client"), pulls.OTHER),
    (api_error(500, "Get \"https://r/v2/\": x509: certificate signed by unknown authority"), pulls.OTHER),
    (api_error(500, "write /var/lib/docker/tmp/x: no space left on device"), pulls.OTHER),
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
    client = FakeClient((), api_error(404, "manifest for team/x:9 not found: manifest unknown"))
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
