"""Bring your own container: jobs run in their image, pulled from a private registry.

End to end through the console (daphne, Celery, agents with `--runtime docker`) against real
containers: Podman serving the Docker Engine API and a password-protected registry
(`containers.py`). Behaviour both runtimes share is tested once, for both, in
test_training_runs.py; here is what only containers do.
"""

from __future__ import annotations

import base64
import contextlib
import html
import json
import time
from pathlib import Path

import pytest
from django.test import Client

from jobs import actions
from jobs.models import TrainingJob
from jobs.tests.storage import space_client
from monitoring.models import LogLine

from .base_image import IMAGE_MARKER
from .containers import RuntimeUnderTest
from .helpers import create_job, stream_text, wait_for_status
from .stack import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def runtime(request, container_host, tmp_path) -> RuntimeUnderTest:
    """Every agent of this module runs commands in containers, with a File Storage root unless the
    test is parametrized with `without-file-storage`."""
    if getattr(request, "param", "") == "without-file-storage":
        return RuntimeUnderTest("docker", container_host, without_file_storage=True)
    return RuntimeUnderTest("docker", container_host, file_storage_root=tmp_path / "file-storage")


def _secret_forms(username: str, password: str) -> list[str]:
    auth = json.dumps({"username": username, "password": password}).encode()
    return [password, base64.b64encode(f"{username}:{password}".encode()).decode(),
            base64.b64encode(auth).decode(), base64.urlsafe_b64encode(auth).decode()]


def assert_password_nowhere(password: str, username: str, stack, owner, jobs: list[TrainingJob]) -> None:
    """Not in a log line, a page, an API answer, a console/worker/agent log or an agent's files."""
    forms = _secret_forms(username, password)
    places: dict[str, str] = {}
    for path in Path(stack.log_dir).rglob("*"):
        if path.is_file() and "output" not in path.parts:  # process logs, agent spools and markers
            places[str(path)] = path.read_bytes().decode(errors="replace")
    places["log lines"] = "\n".join(LogLine.objects.values_list("text", flat=True))
    places["status history"] = "\n".join(str(job.status_reason) for job in TrainingJob.objects.all())
    client = Client()
    client.force_login(owner)
    pages = ["/jobs/", "/api/v1/training-jobs/"]
    for job in jobs:
        pages += [f"/jobs/{job.pk}/", f"/api/v1/training-jobs/{job.pk}/", f"/api/v1/training-jobs/{job.pk}/logs/"]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        places[url] = response.content.decode()
    for where, text in places.items():
        for form in forms:
            assert form not in text, f"the registry password appears in {where}"


def _remove_test_image(host) -> None:
    with contextlib.closing(host.client()) as client:
        for image in client.images.list(name=host.image.rsplit(":", 1)[0]):
            client.images.remove(image.id, force=True)


def test_a_job_runs_in_its_image_pulled_with_its_credentials(alice, bob, stack, start_nodes, container_host, object_store,
                                                             e2e_settings, runtime):
    start_nodes("node-a", "node-b")  # node-b for Bob: node-a may stay warm for Alice (the warm pool)
    _remove_test_image(container_host)  # the first job of this test really pulls
    (runtime.share(alice) / "dataset.txt").write_text("tokens from File Storage\n")
    program = "\n".join([
        "import os, pathlib",
        "print(pathlib.Path('/etc/os-release').read_text())",
        "print('volume:', pathlib.Path('/mnt/data/dataset.txt').read_text().strip())",
        "print('user:', os.getuid(), os.environ['USER'])",
        "print('vendor writable:', os.access(os.environ['CHECKPOINT_VENDOR'], os.W_OK))",
        "print('vendor has datastates:', os.path.isdir(os.environ['CHECKPOINT_VENDOR'] + '/datastates'))",
        "shm = os.statvfs('/dev/shm')",
        "print('shm GiB:', shm.f_blocks * shm.f_frsize // 2**30)",
        "pathlib.Path(os.environ['OUTPUT_DIR'], 'result.txt').write_text('trained in a container')",
    ])
    # File Storage: Alice's share on the nodes, at her mount path inside the container
    job = create_job(alice, "in-image", f'python3 -c "{program}"', volume_mount_path="/mnt/data",
                     **container_host.job_fields())

    job = wait_for_status(job.pk, "Completed", "Failed", timeout=120)

    assert job.status == "Completed", job.status_reason
    lines = stream_text(job.pk, "master")
    # /etc/os-release of the image, not of the host
    assert IMAGE_MARKER in lines and IMAGE_MARKER not in Path("/etc/os-release").read_text()
    assert "volume: tokens from File Storage" in lines
    user = next(line for line in lines if line.startswith("user: ")).split()
    assert user[1] != "0" and user[2] == f"job{user[1]}"  # a user of its own, never root
    assert "vendor writable: False" in lines and "vendor has datastates: True" in lines
    assert "shm GiB: 8" in lines
    # the pull is its own step, after the preparation starts and before the command
    pulling = next(i for i, line in enumerate(lines) if line.startswith(f"[INFO] Pulling image {container_host.image} as registry user trainer"))
    pulled = next(i for i, line in enumerate(lines) if line.startswith(f"[INFO] Pulled image {container_host.image} (id "))
    started = next(i for i, line in enumerate(lines) if line.startswith("[INFO] Starting the command"))
    assert pulling < pulled < started
    # the output directory was uploaded
    bucket, _, prefix = job.result_url[len("s3://"):].partition("/")
    client, _ = space_client(job.owner, object_store.endpoint)  # the owner's own keys read it
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]
    assert any(key.endswith("master/result.txt") for key in keys), keys
    assert container_host.containers(job=str(job.pk)) == []

    # the image leaves the engine: the next job pulls it again, even on a warm start (which
    # reuses the environment job 1 prepared and skips preparation)
    _remove_test_image(container_host)
    again = create_job(alice, "in-image-again", "python3 -c 'print(\"second run\")'", **container_host.job_fields())
    again = wait_for_status(again.pk, "Completed", "Failed", timeout=60)

    assert again.status == "Completed", again.status_reason
    second = stream_text(again.pk, "master")
    assert "second run" in second
    assert any(line.startswith(f"[INFO] Pulled image {container_host.image} (id ") for line in second), second

    # another user's job finds the image on the node: the registry checks Bob's credentials,
    # nothing is downloaded
    other = create_job(bob, "bobs-run", "python3 -c 'print(\"bob ran\")'", **container_host.job_fields())
    other = wait_for_status(other.pk, "Completed", "Failed", timeout=60)

    assert other.status == "Completed", other.status_reason
    third = stream_text(other.pk, "master")
    assert "bob ran" in third
    assert any(line.startswith(f"[INFO] Image {container_host.image} already on this node (id ")
               and "reused, nothing downloaded (registry check" in line for line in third), third
    assert_password_nowhere(container_host.password, container_host.username, stack, alice, [job, again])
    assert_password_nowhere(container_host.password, container_host.username, stack, bob, [other])


@pytest.mark.parametrize("runtime", ["without-file-storage"], indirect=True)
def test_a_mount_path_on_nodes_without_file_storage_fails_the_job_saying_why(alice, start_nodes, container_host,
                                                                              e2e_settings, runtime):
    start_nodes("node-a")
    job = create_job(alice, "no-share-here", "echo never", volume_mount_path="/mnt/data", **container_host.job_fields())

    job = wait_for_status(job.pk, "Failed", "Completed", timeout=60)

    says = ("File Storage is not available on node-a: the job mounts it at /mnt/data, and this node's agent runs "
            "without --file-storage-root")
    assert job.status == "Failed" and says in job.status_reason, job.status_reason
    lines = stream_text(job.pk, "master")
    assert any(line.startswith("[ERROR]") and says in line for line in lines), lines
    assert "never" not in lines
    assert container_host.containers(job=str(job.pk)) == []


def test_a_two_node_job_meets_at_the_master_over_host_networking(alice, start_nodes, container_host, upload_script, e2e_settings):
    start_nodes("node-a", "node-b")
    script = upload_script("handshake.py")
    job = create_job(alice, "two-containers", "python3 handshake.py", node_count=2, script_url=script,
                     **container_host.job_fields())

    job = wait_for_status(job.pk, "Completed", "Failed", timeout=120)

    assert job.status == "Completed", job.status_reason
    master, worker = stream_text(job.pk, "master"), stream_text(job.pk, "worker-1")
    assert "rank 0 got: hello from rank 1" in master
    assert "rank 0: rendezvous complete with 2 ranks" in master
    assert "rank 1 got: welcome, all 2 ranks are here" in worker
    assert container_host.containers(job=str(job.pk)) == []


def test_a_wrong_password_or_a_missing_tag_is_imagepullbackoff_and_says_which(alice, alice_api, stack, start_nodes,
                                                                              container_host, e2e_settings):
    start_nodes("node-a")
    wrong_password = "Not-The-Password-42"
    missing_tag = container_host.image.rsplit(":", 1)[0] + ":does-not-exist"
    refused = create_job(alice, "wrong-password", "echo never", **container_host.job_fields(registry_password=wrong_password))
    missing = create_job(alice, "missing-tag", "echo never", **container_host.job_fields(image_url=missing_tag))

    refused = wait_for_status(refused.pk, "Pending - imagepullbackoff", "Failed", "Completed", timeout=60)
    missing = wait_for_status(missing.pk, "Pending - imagepullbackoff", "Failed", "Completed", timeout=60)

    assert refused.status == "Pending - imagepullbackoff"
    assert f"authentication failed for {container_host.image}" in refused.status_reason
    assert missing.status == "Pending - imagepullbackoff"
    assert f"image not found: {missing_tag}" in missing.status_reason
    for job in (refused, missing):
        # the same words in its log stream, the API and on its page
        assert any(job.status_reason in line for line in stream_text(job.pk, "master"))
        assert alice_api.get(f"/api/v1/training-jobs/{job.pk}/").json()["status_reason"] == job.status_reason
        client = Client()
        client.force_login(alice)
        assert job.status_reason in html.unescape(client.get(f"/jobs/{job.pk}/").content.decode())
        assert not any("Starting the command" in line for line in stream_text(job.pk, "master"))
        assert container_host.containers(job=str(job.pk)) == []
    assert_password_nowhere(wrong_password, container_host.username, stack, alice, [refused, missing])
    assert_password_nowhere(container_host.password, container_host.username, stack, alice, [refused, missing])


def test_deleting_a_running_container_job_removes_it_within_the_grace_period(alice, stack, start_nodes, container_host,
                                                                              e2e_settings):
    grace = float(stack.env["JOB_STOP_GRACE_SECONDS"])
    start_nodes("node-a")
    # the command ignores SIGTERM: only the kill at the end of the grace period stops it
    job = create_job(alice, "stubborn", "trap '' TERM; echo started; while true; do sleep 1; done",
                     **container_host.job_fields())
    wait_for_status(job.pk, "Running", timeout=60)
    wait_until(lambda: "started" in stream_text(job.pk, "master"), timeout=20, message="the command's first line")
    assert container_host.containers(job=str(job.pk)) != []

    deleted = time.monotonic()
    assert actions.delete_job(job.pk) == "terminating"
    wait_until(lambda: not container_host.containers(job=str(job.pk)), timeout=grace + 10, message="the container to be removed")
    gone = time.monotonic() - deleted

    # SIGTERM changed nothing; the kill at the end of the grace period did, and the container went with it
    assert grace - 1 <= gone <= grace + 7, f"removed after {gone:.1f} s with a {grace:g} s grace period"
    wait_until(lambda: not TrainingJob.objects.filter(pk=job.pk).exists(), timeout=20, message="the job to be removed")


def test_an_agent_start_removes_the_containers_its_node_left(alice, stack, start_nodes, container_host, e2e_settings):
    """A container an earlier agent of node-a created (and lost track of) is gone once node-a's agent is up."""
    with contextlib.closing(container_host.client()) as client:
        client.images.pull(container_host.image.rsplit(":", 1)[0], tag="1",
                           auth_config={"username": container_host.username, "password": container_host.password})
        labels = {"simpleai.job": "999999", "simpleai.attempt": "1", "simpleai.role": "master"}
        mine = client.containers.run(container_host.image, ["sleep", "300"], detach=True, init=True, name="stray-of-node-a",
                                     labels={**labels, "simpleai.node": "node-a"})
        other = client.containers.run(container_host.image, ["sleep", "300"], detach=True, init=True, name="stray-of-node-z",
                                      labels={**labels, "simpleai.node": "node-z"})
        try:
            start_nodes("node-a")

            wait_until(lambda: not container_host.containers(node="node-a"), timeout=30, message="node-a's stray to be removed")
            assert container_host.containers(node="node-z") == ["stray-of-node-z"]  # another node's: not touched
            assert "left by an earlier agent process" in stack.agents[-1].output()
        finally:
            for container in (mine, other):
                with contextlib.suppress(Exception):  # already removed
                    container.remove(force=True)
