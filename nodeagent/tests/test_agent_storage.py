"""Object storage for real (SeaweedFS): the script comes in, OUTPUT_DIR goes out."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from nodeagent.storage import S3Settings, Storage, StorageError, parse_s3_url, resolve_settings, routed_environment
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


def _storage(object_store, bucket: str) -> dict:
    """The placement's own credentials (the console mints an attempt's; here the store's)."""
    return {"endpoint_url": object_store.endpoint, "bucket": bucket, "access_key": object_store.access_key,
            "secret_key": object_store.secret_key}


def test_s3_urls_and_settings():
    assert parse_s3_url("s3://b/k/x.py") == ("b", "k/x.py")
    assert parse_s3_url("s3://b") == ("b", "")
    with pytest.raises(StorageError):
        parse_s3_url("https://b/k")
    placement = make_placement(storage={"endpoint_url": "http://console-s3:8333", "bucket": "simpleai-u7",
                                        "access_key": "a", "secret_key": "s"})
    assert resolve_settings({}, placement) == S3Settings("http://console-s3:8333", "a", "s")
    # the agent's own endpoint routes the placement's transfers; its keys are never used
    env = {"S3_ENDPOINT_URL": "http://local:1", "S3_ACCESS_KEY": "x", "S3_SECRET_KEY": "y"}
    assert resolve_settings(env, placement) == S3Settings("http://local:1", "a", "s")
    assert resolve_settings(env, make_placement()) is None  # no credentials of its own: no storage at all


def test_the_agents_endpoint_routes_the_commands_storage_too():
    env = {"S3_ENDPOINT_URL": "http://console-s3:8333", "AWS_ENDPOINT_URL_S3": "http://console-s3:8333", "S3_ACCESS_KEY": "a"}
    assert routed_environment(dict(env), {"S3_ENDPOINT_URL": "http://local:1"}) == {
        "S3_ENDPOINT_URL": "http://local:1", "AWS_ENDPOINT_URL_S3": "http://local:1", "S3_ACCESS_KEY": "a"}
    assert routed_environment(dict(env), {}) == env


def test_it_downloads_the_script_runs_it_and_uploads_the_output(tmp_path, object_store, bucket, monkeypatch):
    for name in ("S3_ENDPOINT_URL", "S3_ACCESS_KEY", "S3_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)  # everything comes with the placement
    placement = make_placement(
        script_url=f"s3://{bucket}/scripts/team/train.py", command="python3 train.py",
        output_prefix=f"s3://{bucket}/jobs/7/attempt-1", storage=_storage(object_store, bucket),
    )

    async def scenario():
        console = FakeConsole([placement])
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
    monkeypatch.setenv("S3_ENDPOINT_URL", object_store.endpoint)  # the agent's own environment routes it
    placement = make_placement(script_url=f"s3://{bucket}/scripts/nope.py", command="echo never",
                               storage={**_storage(object_store, bucket), "endpoint_url": "http://unreachable.invalid:1"})

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


def test_keys_in_a_welcome_or_the_agents_environment_are_not_used(tmp_path, object_store, bucket, monkeypatch):
    """An older console's welcome still carries its keys, an operator's shell may export some: a
    placement without credentials of its own downloads nothing with them."""
    for name, value in object_store.env().items():
        monkeypatch.setenv(name, value)
    placement = make_placement(script_url=f"s3://{bucket}/scripts/team/train.py", command="echo never")
    old_welcome = {"object_storage": {"endpoint_url": object_store.endpoint, "access_key": object_store.access_key,
                                      "secret_key": object_store.secret_key, "results_bucket": bucket}}

    async def scenario():
        console = FakeConsole([placement], welcome_extra=old_welcome)
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)):
            await until(console.exited, timeout=20, what="the exited report")
        return console

    exited = asyncio.run(scenario()).exited()
    assert exited["failure"] == "script_download"
    assert "carries no object-storage credentials" in exited["message"]
    assert not (tmp_path / "jobs/7/attempt-1/master/train.py").exists()


def test_upload_of_a_nested_tree_to_a_bucket_root(tmp_path, object_store, bucket):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c.txt").write_text("c")
    storage = Storage(S3Settings(object_store.endpoint, object_store.access_key, object_store.secret_key))
    assert storage.upload_tree(tmp_path, f"s3://{bucket}").files == 1
    assert object_store.client().get_object(Bucket=bucket, Key="a/b/c.txt")["Body"].read() == b"c"


def test_links_in_the_output_are_never_followed(tmp_path, object_store, bucket):
    """A job's OUTPUT_DIR is the job's: a link to a node file (the token, another tenant's share)
    must not make the agent, who reads as root, upload that file into the job's results."""
    secret = tmp_path / "node-secret"
    secret.write_text("the node's token")
    out = tmp_path / "output"
    (out / "real").mkdir(parents=True)
    (out / "real" / "model.pt").write_bytes(b"weights")
    (out / "token").symlink_to(secret)
    (out / "etc").symlink_to(tmp_path)  # a link to a directory: not walked either
    (out / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(out / "pipe")  # never read (it would block the upload)
    storage = Storage(S3Settings(object_store.endpoint, object_store.access_key, object_store.secret_key))
    uploaded = storage.upload_tree(out, f"s3://{bucket}/job")
    keys = sorted(o["Key"] for o in object_store.client().list_objects_v2(Bucket=bucket, Prefix="job/").get("Contents", []))
    assert keys == ["job/real/model.pt"]
    assert (uploaded.files, uploaded.left_out) == (1, 4)
    assert uploaded.describe() == "1 file; 4 links or special files left out"
