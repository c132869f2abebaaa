"""The Docker runtime's pulls against a real private registry (Podman's Docker API, `containers.py`).

Every failure a user can cause ends in an ImageError whose words say which one; the end to
end path (→ `Pending - imagepullbackoff`) is in test_containers.py.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from nodeagent.logstream import LogStream, Outbox
from nodeagent.runtimes import ImageError
from nodeagent.runtimes.docker import DockerRuntime, find_engine
from nodeagent.spool import Spool
from nodeagent.tests.agent_support import make_placement

from .containers import free_port

pytestmark = pytest.mark.slow


@pytest.fixture
def pull(container_host, tmp_path):
    """pull(image, registry=..., delays=...) → the job's log lines; raises ImageError."""
    counter = iter(range(1000))

    def pull(image: str, registry: dict[str, str] | None, delays: tuple[float, ...] = (0.2, 0.2)) -> list[str]:
        runtime = DockerRuntime(real_gpus=False, client=container_host.client(), node_name="pull-test")
        runtime.pull_retry_delays = delays
        spool = Spool(tmp_path / f"spool-{next(counter)}")
        log = LogStream(Outbox(spool), 1, 1, "master")

        async def go():
            try:
                await runtime.prepare_image(make_placement(image=image, registry=registry), log)
            finally:
                log.flush()

        try:
            asyncio.run(go())
        finally:
            spool.sync()
            lines = [line[2] for _, text in spool.unsent(0) for line in json.loads(text)["lines"]]
            pull.lines = lines
        return lines

    return pull


def _credentials(host, password=None):
    return {"username": host.username, "password": password or host.password}


def test_the_right_credentials_pull_and_a_second_pull_reuses_the_image(container_host, pull):
    lines = pull(container_host.image, _credentials(container_host))
    assert any(line.startswith(f"[INFO] Pulled image {container_host.image}") or "already on this node" in line for line in lines)
    again = pull(container_host.image, _credentials(container_host))
    assert "reused, nothing downloaded" in again[-1]


def test_a_wrong_password_is_an_authentication_failure_even_with_the_image_on_the_node(container_host, pull):
    pull(container_host.image, _credentials(container_host))  # on the node now
    with pytest.raises(ImageError) as raised:
        pull(container_host.image, _credentials(container_host, "wrong-Password-9"))
    message = str(raised.value)
    assert message.startswith(f"Image pull failed on pull-test: authentication failed for {container_host.image}: the registry refused")
    assert "wrong-Password-9" not in message and "wrong-Password-9" not in "\n".join(pull.lines)


def test_no_credentials_for_a_private_registry_is_an_authentication_failure(container_host, pull):
    with pytest.raises(ImageError, match="the registry wants a user ID and password, and the job gives none"):
        pull(container_host.image, None)


def test_a_missing_tag_or_repository_is_not_found(container_host, pull):
    for image in (f"{container_host.registry}/team/minbase:no-such-tag", f"{container_host.registry}/team/no-such-repo:1"):
        with pytest.raises(ImageError, match=f"image not found: {image} does not exist"):
            pull(image, _credentials(container_host))


def test_an_invalid_reference_says_so(container_host, pull):
    with pytest.raises(ImageError, match="invalid image reference"):
        pull(f"{container_host.registry}/Team/MinBase:1", _credentials(container_host))


def test_an_unreachable_registry_is_retried_then_given_up(container_host, pull):
    image = f"127.0.0.1:{free_port()}/team/minbase:1"  # nothing listens there
    # one retry is enough to see it here (each try already takes ~3 s: Podman retries inside)
    with pytest.raises(ImageError, match=rf"registry unreachable for {image} \(2 tries\)"):
        pull(image, _credentials(container_host), delays=(0.1,))
    retries = [line for line in pull.lines if line.startswith(f"[WARN] Registry unreachable for {image} (try ")]
    assert len(retries) == 1 and "connection refused" in retries[0] and retries[0].endswith("trying again in 0.1 s")


def test_the_engine_is_found_where_docker_host_points(container_host):
    url, product = find_engine({"DOCKER_HOST": container_host.docker_host})
    assert url == container_host.docker_host and product.startswith("Podman Engine")
