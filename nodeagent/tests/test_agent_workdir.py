"""A whole project on a real agent with real object storage (SeaweedFS): the workdir unpacked as the
command's working directory, an input synced read-only, a requirements.txt installed on top of the
environment, all cached on the node for the next job.

Offline: the requirements file names a tiny pure-Python wheel that the test builds into the
project's `wheels/` directory, with `--no-index --find-links wheels` (pip reads a relative
--find-links against the requirements file), so pip never reaches a network.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
import uuid
import zipfile
from pathlib import Path

import pytest

from nodeagent.runtimes.process import ProcessRuntime
from nodeagent.sandbox import SandboxSettings
from nodeagent.tests.agent_support import (
    FakeConsole,
    make_config,
    make_placement,
    process_runtime,
    running_agent,
    running_console,
    until,
)

ALICE = {"id": 901, "name": "alice"}
TRAIN = """\
import json, os, pathlib, sys
import tinypkg
from lib.model import describe
config = json.loads(pathlib.Path("config/settings.json").read_text())
data = pathlib.Path(os.environ["SIMPLEAI_INPUT_TRAIN"])
rows = sorted(p.relative_to(data).as_posix() + "=" + p.read_text().strip() for p in data.rglob("*.txt"))
print("model:", describe(config["layers"]), "tiny:", tinypkg.VERSION, "rows:", ",".join(rows))
labels = pathlib.Path(os.environ["SIMPLEAI_INPUT_LABELS"])
print("labels:", labels.name, labels.read_text().strip())
print("python:", "overlay" if os.environ.get("VIRTUAL_ENV") == sys.prefix else sys.prefix)
try:
    (data / "a.txt").write_text("changed")
    print("input: writable")
except OSError as exc:
    print("input: read-only", type(exc).__name__)
pathlib.Path("scratch.txt").write_text("the job may write its own copy")
(pathlib.Path(os.environ["OUTPUT_DIR"]) / "result.json").write_text(json.dumps({"rows": len(rows)}))
"""


def _wheel(name: str, version: str) -> bytes:
    """A pure-Python wheel of one module (what `pip wheel` would make for it), built in memory."""
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n".encode(),
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for path, data in files.items()) + f"{name}-{version}.dist-info/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{name}-{version}.dist-info/RECORD", record)
    return buffer.getvalue()


def _project(files: dict[str, bytes]) -> tuple[bytes, str]:
    """A gzip'd tar as the CLI packs it (sorted, mtime 0, owner 0); returns (bytes, sha256)."""
    buffer = io.BytesIO()
    # the gzip header's own time is 0 too: packed twice, a project has one sha256
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as packed, tarfile.open(fileobj=packed, mode="w") as tar:
        for path in sorted(files):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(files[path]), 0o644, 0
            tar.addfile(info, io.BytesIO(files[path]))
    data = buffer.getvalue()
    return data, hashlib.sha256(data).hexdigest()


@pytest.fixture
def bucket(object_store):
    client = object_store.client()
    name = f"simpleai-u901-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=name)
    client.put_object(Bucket=name, Key="datasets/v1/a.txt", Body=b"1")
    client.put_object(Bucket=name, Key="datasets/v1/sub/b.txt", Body=b"2")
    client.put_object(Bucket=name, Key="labels/names.csv", Body=b"cat,dog\n")
    return name


def _placement(object_store, bucket: str, job_id: int, project: dict[str, bytes], inputs: list[dict], **extra):
    data, sha = _project(project)
    object_store.client().put_object(Bucket=bucket, Key=f"workdirs/{sha}.tar.gz", Body=data)
    return make_placement(**{"command": "python train.py", **extra},
        job_id=job_id, tenant=ALICE, workdir={"url": f"s3://{bucket}/workdirs/{sha}.tar.gz", "sha256": sha},
        inputs=inputs, output_prefix=f"s3://{bucket}/jobs/{job_id}/attempt-1",
        storage={"endpoint_url": object_store.endpoint, "bucket": bucket, "access_key": object_store.access_key,
                 "secret_key": object_store.secret_key})


def _texts(console: FakeConsole, job_id: int) -> list[str]:
    return [line[2] for batch in console.of_type("logs") if batch["job_id"] == job_id for line in batch["lines"]]


def _exited(console: FakeConsole, job_id: int) -> dict | None:
    return next((m for m in console.of_type("attempt") if m["job_id"] == job_id and m["state"] == "exited"), None)


PROJECT = {
    "train.py": TRAIN.encode(),
    "lib/__init__.py": b"",
    "lib/model.py": b"def describe(layers):\n    return f'{layers} layers'\n",
    "config/settings.json": b'{"layers": 4}',
    "requirements.txt": b"--no-index\n--find-links wheels\ntinypkg==1.0\n",
    "wheels/tinypkg-1.0-py3-none-any.whl": _wheel("tinypkg", "1.0"),
}


def test_a_project_with_an_input_and_requirements_runs_and_its_second_job_reuses_everything(tmp_path, object_store, bucket,
                                                                                         monkeypatch):
    monkeypatch.delenv("S3_ENDPOINT_URL", raising=False)
    inputs = [{"name": "train", "url": f"s3://{bucket}/datasets/v1/"}, {"name": "Labels", "url": f"s3://{bucket}/labels/names.csv"}]
    first = _placement(object_store, bucket, 41, PROJECT, inputs)
    second = _placement(object_store, bucket, 42, PROJECT, inputs)

    async def scenario():
        console = FakeConsole([first])
        async with running_console(console) as port, running_agent(make_config(tmp_path / "node", port, env_cache=tmp_path / "envs")):
            await until(lambda: _exited(console, 41), timeout=60, what="the first job")
            await console.set_desired([second])
            await until(lambda: _exited(console, 42), timeout=60, what="the second job")
        return console

    console = asyncio.run(scenario())
    first_lines, second_lines = _texts(console, 41), _texts(console, 42)
    assert _exited(console, 41)["exit_code"] == 0, first_lines
    assert "model: 4 layers tiny: 1.0 rows: a.txt=1,sub/b.txt=2" in first_lines
    assert "labels: names.csv cat,dog" in first_lines  # one object: the variable names the file
    if os.geteuid() == 0:  # sandboxed: the input is bound read-only into the job
        assert "input: read-only OSError" in first_lines or any(line.startswith("input: read-only") for line in first_lines)
    assert any(line.startswith("[INFO] Workdir ") and "6 files" in line and "downloaded and unpacked" in line for line in first_lines), first_lines
    assert any(line.startswith("[INFO] Input train: ") and "2 files" in line for line in first_lines), first_lines
    assert any(line.startswith("[INFO] Input train ready at $SIMPLEAI_INPUT_TRAIN: 2 files, 2 bytes, 2 downloaded") for line in first_lines), first_lines
    assert any("requirements.txt: installing it on top of" in line for line in first_lines), first_lines
    assert any("Successfully installed tinypkg-1.0" in line for line in first_lines), first_lines
    assert "python: overlay" in first_lines  # `python` is the overlay's, on top of the node's environment
    # the second job: nothing downloaded, nothing installed, the same results
    assert _exited(console, 42)["exit_code"] == 0, second_lines
    assert "model: 4 layers tiny: 1.0 rows: a.txt=1,sub/b.txt=2" in second_lines
    assert any("already on this node, nothing downloaded" in line for line in second_lines), second_lines
    assert any("2 files, 2 bytes, from this node's cache" in line for line in second_lines), second_lines
    assert any("requirements.txt: installed on this node already" in line for line in second_lines), second_lines
    # the job changed its own copy, never the node's cache
    node = tmp_path / "node"
    assert (node / "jobs/41/attempt-1/master/scratch.txt").exists()
    assert not list((node / "projects").rglob("scratch.txt"))
    assert [p.read_text() for p in (node / "inputs").rglob("a.txt")] == ["1"]
    listed = object_store.client().list_objects_v2(Bucket=bucket, Prefix="jobs/41/")
    assert [o["Key"] for o in listed["Contents"]] == ["jobs/41/attempt-1/master/result.json"]


def test_what_cannot_be_prepared_fails_the_job_with_its_own_reason(tmp_path, object_store, bucket, monkeypatch):
    monkeypatch.delenv("S3_ENDPOINT_URL", raising=False)
    broken_requirements = {**PROJECT, "requirements.txt": b"--no-index\n--find-links wheels\nnot-there==9\n"}
    bad_requirements = _placement(object_store, bucket, 51, broken_requirements, [])
    missing_input = _placement(object_store, bucket, 52, PROJECT, [{"name": "data", "url": f"s3://{bucket}/nothing/here/"}])
    tampered = _placement(object_store, bucket, 53, {"train.py": b"print(1)\n"}, [])
    tampered["workdir"]["sha256"] = "0" * 64
    foreign = _placement(object_store, bucket, 54, PROJECT, [{"name": "data", "url": "s3://someone-else/data/"}])

    async def scenario():
        console = FakeConsole([bad_requirements, missing_input, tampered, foreign])
        async with running_console(console) as port, running_agent(make_config(tmp_path / "node", port, env_cache=tmp_path / "envs")):
            await until(lambda: all(_exited(console, job) for job in (51, 52, 53, 54)), timeout=60, what="four exits")
        return console

    console = asyncio.run(scenario())
    report = _exited(console, 51)
    assert report["failure"] == "requirements"
    assert "requirements.txt could not be installed (pip exit code 1)" in report["message"]
    assert "No matching distribution found for not-there==9" in report["message"]
    assert "Traceback" not in report["message"]
    report = _exited(console, 52)
    assert report["failure"] == "input_download"
    assert f"Input data: s3://{bucket}/nothing/here/ names no object and no prefix holding objects" in report["message"]
    report = _exited(console, 53)
    assert report["failure"] == "workdir_download" and "is not the project the job was created with" in report["message"]
    report = _exited(console, 54)
    assert report["failure"] == "input_download" and "is not in the job owner's storage space" in report["message"]
    for job in (51, 52, 53, 54):
        assert not any(line.startswith("[INFO] Starting the command") for line in _texts(console, job))


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root (as in CI)")
def test_a_build_runs_as_the_job_s_user_in_its_tenant_s_group_never_root(tmp_path):
    directory = tmp_path / "overlay"
    directory.mkdir()
    lines: list[str] = []
    placement = make_placement(job_id=61, tenant=ALICE, mount_path="/mnt/never")
    code = asyncio.run(process_runtime().run_build(placement, directory, "id -u; id -g; touch built; ls /mnt/never",
                                                   {"PATH": os.defpath}, lines.append))
    uid, gid = int(lines[0]), int(lines[1])
    assert uid >= 1_000_000 and gid == 2_000_000_901
    assert code != 0 and any("/mnt/never" in line for line in lines)  # no File Storage in a build
    assert (directory / "built").stat().st_uid == 0  # handed back to the agent afterwards


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root (as in CI)")
def test_a_build_writes_its_overlay_inside_the_read_only_environment_cache():
    # as on a node: the overlay is <env cache>/overlays/<key>, the cache is bound read-only into
    # every sandbox, and the directories on the way are the node's own (not under /tmp or
    # /var/tmp, which every sandbox replaces with a tmpfs, or pytest's 0700 tmp_path: there
    # each path gets a mount of its own, which hid the bug)
    root = Path(tempfile.mkdtemp(dir="/var/cache", prefix="simpleai-test-envcache-"))
    try:
        root.chmod(0o755)
        cache = root / "environments"
        directory = cache / "overlays" / "k"
        directory.mkdir(parents=True)
        for path in (cache, cache / "overlays"):
            path.chmod(0o755)
        lines: list[str] = []
        runtime = ProcessRuntime(real_gpus=False, sandbox=SandboxSettings(readable=(cache,), node_name="test-node"))
        code = asyncio.run(runtime.run_build(make_placement(job_id=62, tenant=ALICE), directory,
                                             "touch built && echo built; touch ../beside || echo the cache is read-only",
                                             {"PATH": os.defpath, "VIRTUAL_ENV": str(directory)}, lines.append))
        assert code == 0, lines
        assert (directory / "built").exists() and "built" in lines
        assert "the cache is read-only" in lines and not (cache / "overlays" / "beside").exists()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root (as in CI)")
def test_a_share_at_a_home_directory_is_the_hugging_face_cache_and_root_says_why_not(tmp_path):
    home = f"/home/simpleai-test-{uuid.uuid4().hex[:8]}"
    at_home = make_placement(job_id=71, tenant=ALICE, mount_path=home, command='echo "HF_HOME=$HF_HOME"; ls -A "$HF_HOME"')
    at_root = make_placement(job_id=72, tenant=ALICE, mount_path="/root", command="echo never")
    shares = tmp_path / "file-storage"
    (shares / "901" / ".cache" / "huggingface" / "hub").mkdir(parents=True)

    async def scenario():
        console = FakeConsole([at_home, at_root])
        async with running_console(console) as port, running_agent(make_config(tmp_path / "node", port, file_storage_root=shares)):
            await until(lambda: _exited(console, 71) and _exited(console, 72), timeout=30, what="two exits")
        return console

    try:
        console = asyncio.run(scenario())
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(home)
    assert f"HF_HOME={home}/.cache/huggingface" in _texts(console, 71) and "hub" in _texts(console, 71)
    report = _exited(console, 72)
    if sys.base_prefix.startswith("/root/"):  # this node's Python lives in /root: the job could not run it
        assert report["failure"] == "environment"
        assert f"/root overlaps {sys.base_prefix}" in report["message"]
        assert "set HF_HOME=/mnt/data/.cache/huggingface" in report["message"]
    else:
        assert report["exit_code"] == 0


def _seeded_pytorch(cache: Path) -> dict | None:
    """The seeded PyTorch environment when `make environments` has built it on this machine."""
    for manifest in sorted(cache.glob("envs/*/simpleai-environment.json")):
        record = json.loads(manifest.read_text())
        if record.get("framework") == "pytorch":
            return {"name": record["name"], "framework": "pytorch", "framework_label": "PyTorch",
                    "version": record["version"], "requirements": record["requirements"], "image": ""}
    return None


SHARED_CACHE = Path(os.environ.get("SIMPLEAI_CACHE_DIR", "/var/cache/simpleai")) / "environments"


@pytest.mark.skipif(_seeded_pytorch(SHARED_CACHE) is None, reason="the seeded environments are not built (make environments)")
def test_requirements_go_on_top_of_the_framework_environment_and_never_replace_torch(tmp_path, object_store, bucket,
                                                                                    monkeypatch):
    monkeypatch.delenv("S3_ENDPOINT_URL", raising=False)
    # the machine's built environments, seen through a cache of this test's own (the overlays land here)
    cache = tmp_path / "envs"
    cache.mkdir()
    for name in ("envs", "layers"):
        (cache / name).symlink_to(SHARED_CACHE / name)
    spec = _seeded_pytorch(SHARED_CACHE)
    check = {**PROJECT, "train.py": b"import torch, tinypkg\nprint('torch', torch.__version__.split('+')[0], 'tiny', tinypkg.VERSION)\n"}
    on_top = _placement(object_store, bucket, 81, check, [], environment=spec,
                        command='python train.py && head -1 "$(command -v torchrun)"')
    replacing = {**PROJECT, "requirements.txt": b"--no-index\n--find-links wheels\ntorch==1.0\n"}
    conflict = _placement(object_store, bucket, 82, replacing, [], environment=spec)

    async def scenario():
        console = FakeConsole([on_top, conflict])
        async with running_console(console) as port, running_agent(make_config(tmp_path / "node", port, env_cache=cache)):
            await until(lambda: _exited(console, 81) and _exited(console, 82), timeout=120, what="two exits")
        return console

    console = asyncio.run(scenario())
    lines = _texts(console, 81)
    assert _exited(console, 81)["exit_code"] == 0, lines
    assert f"torch {spec['version']} tiny 1.0" in lines
    overlay = next(line for line in lines if line.startswith("#!"))  # torchrun of the overlay's own python
    assert overlay.startswith(f"#!{cache}/overlays/") and overlay.endswith("/bin/python")
    assert any(f"requirements.txt: installing it on top of {spec['name']}" in line for line in lines)
    report = _exited(console, 82)
    assert report["failure"] == "requirements", report
    # pip's own words: what was asked, and the framework's pin it may not replace
    assert "Cannot install torch==1.0" in report["message"] and "==2.13.0" in report["message"], report
