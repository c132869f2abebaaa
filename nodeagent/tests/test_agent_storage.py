"""Object storage for real (SeaweedFS): the script comes in, OUTPUT_DIR goes out."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from nodeagent.storage import S3Settings, Storage, StorageError, parse_s3_url, resolve_settings
from nodeagent.tests.agent_support import (
    FakeConsole,
    make_config,
    make_placement,
    running_agent,
    running_console,
    until,
)

TRAIN = """\
import os, pathlib
out = pathlib.Path(os.environ["OUTPUT_DIR"])
(out / "model").mkdir()
(out / "model" / "weights.txt").write_text("w")
(out / "metrics.json").write_text("{}")
print("trained on", os.environ["JOB_NAME"])
"""


@pytest.fixture
def bucket(object_store):
    """A fresh bucket on the session's SeaweedFS, holding the training script."""
    client = object_store.client()
    name = f"agent-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    client.put_object(Bucket=name, Key="scripts/team/train.py", Body=TRAIN.encode())
    return name


def test_s3_urls_and_settings():
    assert parse_s3_url("s3://b/k/x.py") == ("b", "k/x.py")
    assert parse_s3_url("s3://b") == ("b", "")
    with pytest.raises(StorageError):
        parse_s3_url("https://b/k")
    welcome = {"endpoint_url": "http://console-s3:8333", "access_key": "a", "secret_key": "s", "results_bucket": "r"}
    assert resolve_settings({}, welcome) == S3Settings("http://console-s3:8333", "a", "s")
    env = {"S3_ENDPOINT_URL": "http://local:1", "S3_ACCESS_KEY": "x", "S3_SECRET_KEY": "y"}
    assert resolve_settings(env, welcome) == S3Settings("http://local:1", "x", "y")
    assert resolve_settings({}, None) is None


def test_it_downloads_the_script_runs_it_and_uploads_the_output(tmp_path, object_store, bucket, monkeypatch):
    for name in ("S3_ENDPOINT_URL", "S3_ACCESS_KEY", "S3_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)  # the settings come from `welcome`
    placement = make_placement(
        script_url=f"s3://{bucket}/scripts/team/train.py", command="python3 train.py",
        output_prefix=f"s3://{bucket}/jobs/7/attempt-1",
    )
    storage = {"endpoint_url": object_store.endpoint, "access_key": object_store.access_key,
               "secret_key": object_store.secret_key, "results_bucket": bucket}

    async def scenario():
        console = FakeConsole([placement], object_storage=storage)
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)):
            await until(console.exited, timeout=20, what="the exited report")
        return console

    console = asyncio.run(scenario())
    texts = console.texts()
    assert any(t.startswith(f"[INFO] Downloading training script s3://{bucket}/scripts/team/train.py ({len(TRAIN)} bytes, ") for t in texts)
    assert "trained on demo-job" in texts
    assert f"[INFO] Output uploaded to s3://{bucket}/jobs/7/attempt-1/master (2 files)" in texts
    exited = console.exited()
    assert exited["exit_code"] == 0 and exited["output_url"] == f"s3://{bucket}/jobs/7/attempt-1/master"
    listed = object_store.client().list_objects_v2(Bucket=bucket, Prefix="jobs/7/attempt-1/")
    assert sorted(o["Key"] for o in listed["Contents"]) == [
        "jobs/7/attempt-1/master/metrics.json", "jobs/7/attempt-1/master/model/weights.txt",
    ]
    assert (tmp_path / "jobs/7/attempt-1/master/train.py").read_text() == TRAIN


def test_a_missing_script_fails_the_placement_with_code_1(tmp_path, object_store, bucket, monkeypatch):
    for name, value in object_store.env().items():
        monkeypatch.setenv(name, value)  # the agent's own environment names the endpoint
    placement = make_placement(script_url=f"s3://{bucket}/scripts/nope.py", command="echo never")

    async def scenario():
        console = FakeConsole([placement])
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)) as agent:
            await until(console.exited, timeout=20, what="the exited report")
            assert agent.supervisor.running() == []
        return console

    console = asyncio.run(scenario())
    exited = console.exited()
    assert exited["exit_code"] == 1 and "image_error" not in exited
    assert exited["failure"] == "script_download"
    expected = f"Could not download the training script s3://{bucket}/scripts/nope.py: no such object"
    assert exited["message"] == expected
    assert f"[ERROR] {expected}" in console.texts()
    assert "never" not in console.texts()
    assert console.states() == ["preparing", "exited"]


def test_upload_of_a_nested_tree_to_a_bucket_root(tmp_path, object_store, bucket):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c.txt").write_text("c")
    storage = Storage(S3Settings(object_store.endpoint, object_store.access_key, object_store.secret_key))
    assert storage.upload_tree(tmp_path, f"s3://{bucket}") == 1
    assert object_store.client().get_object(Bucket=bucket, Key="a/b/c.txt")["Body"].read() == b"c"
