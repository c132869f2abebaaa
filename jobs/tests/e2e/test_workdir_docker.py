"""A project (workdir) and its inputs under the Docker runtime, in a real container (Podman's Docker
Engine API, `containers.py`), with real object storage (SeaweedFS): the command runs in its copy of
the project, the inputs are mounted read-only at /simpleai/inputs/<NAME>, and its requirements.txt is
installed for the image (in a container of it, as the job's tenant; the image has no pip: the node's
is lent), cached per node: the next job with the same file reuses it; a requirement pip cannot find
fails the job's preparation with pip's own words."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import os
import uuid
import zipfile

import pytest

from nodeagent.runtimes.docker import DockerRuntime
from nodeagent.tests.agent_support import FakeConsole, make_config, running_agent, running_console, until
from nodeagent.tests.test_agent_workdir import PROJECT, _exited, _placement, _texts, _wheel

pytestmark = pytest.mark.slow

COMMAND = ('cat lib/model.py; echo "in $PWD"; cat "$SIMPLEAI_INPUT_TRAIN/sub/b.txt"; echo; cat "$SIMPLEAI_INPUT_LABELS"; '
           'echo "labels at $SIMPLEAI_INPUT_LABELS"; (echo x > "$SIMPLEAI_INPUT_TRAIN/a.txt") 2>/dev/null && echo writable || echo read-only; '
           'python3 -c "import tinypkg; print(\'tiny\', tinypkg.VERSION, tinypkg.__file__)"; '
           '(touch "$PYTHONUSERBASE/x") 2>/dev/null && echo overlay-writable || echo overlay-read-only')


@pytest.fixture
def bucket(object_store):
    client = object_store.client()
    name = f"simpleai-u901-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=name)
    client.put_object(Bucket=name, Key="datasets/v1/a.txt", Body=b"1")
    client.put_object(Bucket=name, Key="datasets/v1/sub/b.txt", Body=b"2")
    client.put_object(Bucket=name, Key="labels/names.csv", Body=b"cat,dog\n")
    return name


def test_a_container_job_runs_in_its_project_with_its_inputs_read_only(container_host, object_store, bucket, tmp_path,
                                                                       monkeypatch):
    monkeypatch.delenv("S3_ENDPOINT_URL", raising=False)
    node = f"workdir-docker-{os.getpid()}"
    registry = {"username": container_host.username, "password": container_host.password}
    inputs = [{"name": "train", "url": f"s3://{bucket}/datasets/v1/"}, {"name": "labels", "url": f"s3://{bucket}/labels/names.csv"}]
    first = _placement(object_store, bucket, 91, PROJECT, inputs, command=COMMAND, image=container_host.image, registry=registry)
    second = _placement(object_store, bucket, 92, PROJECT, [],
                        command='python3 -c "import tinypkg; print(\'tiny\', tinypkg.VERSION)"', image=container_host.image, registry=registry)
    broken = {**PROJECT, "requirements.txt": b"--no-index\n--find-links wheels\nnot-there==9\n",
              "wheels/other-1.0-py3-none-any.whl": _wheel("other", "1.0")}
    bad = _placement(object_store, bucket, 93, broken, [], command="true", image=container_host.image, registry=registry)
    bobs = _placement(object_store, bucket, 96, PROJECT, [], command=second["command"], image=container_host.image,
                      registry=registry)
    bobs["tenant"] = {"id": 902, "name": "bob"}  # the same file, another tenant: never Alice's installation

    async def scenario():
        console = FakeConsole([first])
        runtime = DockerRuntime(real_gpus=False, client=container_host.client(), node_name=node)
        async with running_console(console) as port, running_agent(make_config(tmp_path, port, name=node, runtime="docker"),
                                                                   runtime):
            await until(lambda: _exited(console, 91), timeout=180, what="the exit")
            await console.set_desired([second, bad, bobs])
            await until(lambda: all(_exited(console, job) for job in (92, 93, 96)), timeout=240, what="three more exits")
        return console

    console = asyncio.run(scenario())
    lines = _texts(console, 91)
    assert _exited(console, 91)["exit_code"] == 0, lines
    assert "def describe(layers):" in lines and "in /simpleai/work" in lines
    assert "2" in lines and "cat,dog" in lines and "labels at /simpleai/inputs/LABELS/names.csv" in lines
    assert "read-only" in lines and "writable" not in lines
    assert any("requirements.txt: installing it in a container of" in line for line in lines), lines
    assert any("Successfully installed tinypkg-1.0" in line for line in lines), lines
    assert any(line.startswith("tiny 1.0 /simpleai/requirements/lib/python3") for line in lines), lines
    assert "overlay-read-only" in lines and "overlay-writable" not in lines  # the job cannot change the cache
    # the same requirements.txt again: nothing installed
    lines = _texts(console, 92)
    assert _exited(console, 92)["exit_code"] == 0, lines
    assert any("requirements.txt: installed for this image on this node already" in line for line in lines), lines
    assert "tiny 1.0" in lines
    lines = _texts(console, 96)
    assert _exited(console, 96)["exit_code"] == 0, lines
    assert any("requirements.txt: installing it in a container of" in line for line in lines), lines
    assert "tiny 1.0" in lines
    # a requirement pip cannot find: pip's words, no stack, and nothing left in the cache
    report = _exited(console, 93)
    assert report["failure"] == "requirements", report
    assert "requirements.txt could not be installed (pip exit code 1)" in report["message"]
    assert "No matching distribution found for not-there==9" in report["message"]
    assert "Traceback" not in report["message"]


def test_requirements_go_on_top_of_the_images_packages_and_never_replace_its_torch(container_host, object_store, bucket,
                                                                                    tmp_path, monkeypatch):
    """The frameworks image holds torch: a requirement it satisfies is not installed again, and one
    that would replace it fails with pip's own words."""
    monkeypatch.delenv("S3_ENDPOINT_URL", raising=False)
    node = f"workdir-docker-torch-{os.getpid()}"
    registry = {"username": container_host.username, "password": container_host.password}
    image = container_host.frameworks_image
    keeping = {**PROJECT, "requirements.txt": b"--no-index\n--find-links wheels\ntinycli==1.0\ntorch\n",
               "wheels/tinycli-1.0-py3-none-any.whl": _cli_wheel()}
    replacing = {**PROJECT, "requirements.txt": b"--no-index\n--find-links wheels\ntorch==1.0\n"}
    command = 'tinycli && python3 -c "import tinycli, torch; print(\'tiny\', tinycli.VERSION, \'torch at\', torch.__file__)"'
    kept = _placement(object_store, bucket, 94, keeping, [], command=command, image=image, registry=registry)
    replaced = _placement(object_store, bucket, 95, replacing, [], command="true", image=image, registry=registry)

    async def scenario():
        console = FakeConsole([kept, replaced])
        runtime = DockerRuntime(real_gpus=False, client=container_host.client(), node_name=node)
        async with running_console(console) as port, running_agent(make_config(tmp_path, port, name=node, runtime="docker"),
                                                                   runtime):
            await until(lambda: _exited(console, 94) and _exited(console, 95), timeout=300, what="two exits")
        return console

    console = asyncio.run(scenario())
    lines = _texts(console, 94)
    assert _exited(console, 94)["exit_code"] == 0, lines
    assert any("Requirement already satisfied: torch" in line for line in lines), lines
    assert "tinycli says hello" in lines  # its program is on PATH
    assert any(line.startswith("tiny 1.0 torch at /usr/local/lib/python3") for line in lines), lines  # the image's torch
    report = _exited(console, 95)
    assert report["failure"] == "requirements", report
    assert "torch==1.0" in report["message"] and "Traceback" not in report["message"], report


def _cli_wheel() -> bytes:
    """A wheel whose package has a program (`tinycli`, a console script pip makes at install)."""
    name, version = "tinycli", "1.0"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n\ndef main():\n    print('tinycli says hello')\n".encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": f"[console_scripts]\n{name} = {name}:main\n".encode(),
    }
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for path, data in files.items()) + f"{info}/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{info}/RECORD", record)
    return buffer.getvalue()
