"""The agent reports a checkpoint step to the console only when the job itself signed it.

Real SeaweedFS; manifests are made with the checkpoint library's own signing module (the one
the agent loads from the vendor directory), and once by the library itself, end to end.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from types import SimpleNamespace

import pytest

from nodeagent.checkpoint_trust import signing
from nodeagent.checkpoints import CheckpointWatcher
from nodeagent.storage import S3Settings, Storage

JOB_KEY = bytes.fromhex("6a" * 32)
OTHER_JOBS_KEY = bytes.fromhex("5b" * 32)


class RecordingOutbox:
    def __init__(self) -> None:
        self.reported: list[tuple[int, str]] = []

    def checkpoint(self, placement, step: int, url: str) -> None:
        self.reported.append((step, url))


class CountingClient:
    """The real boto3 client, counting the manifests it fetches."""

    def __init__(self, client) -> None:
        self._client = client
        self.gets = 0

    def get_object(self, **kwargs):
        self.gets += 1
        return self._client.get_object(**kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)


@pytest.fixture
def bucket(object_store):
    name = f"trust-{uuid.uuid4().hex[:12]}"
    object_store.client().create_bucket(Bucket=name)
    return name


@pytest.fixture
def storage(object_store):
    client = CountingClient(object_store.client())
    return Storage(S3Settings(object_store.endpoint, object_store.access_key, object_store.secret_key), client=client)


def manifest(step: int, key: bytes | None) -> bytes:
    body = {"step": step, "world_size": 1, "time": "2026-12-04T00:00:00.000+00:00", "created": 1.0,
            "files": [], "metadata": {}, "format": 2}
    return json.dumps(signing.sign(body, key) if key is not None else body).encode()


def put(object_store, bucket: str, step: int, body: bytes) -> None:
    object_store.client().put_object(Bucket=bucket, Key=f"jobs/7/checkpoints/step-{step}/MANIFEST.json", Body=body)


def watch(storage, bucket: str, env_key: bytes | None):
    env = {"CHECKPOINT_S3_URL": f"s3://{bucket}/jobs/7/checkpoints"}
    if env_key is not None:
        env["CHECKPOINT_SIGNING_KEY"] = env_key.hex()
    # the watcher lists with each placement's own credentials (Runner.storage)
    runner = SimpleNamespace(placement={"job_id": 7, "attempt": 1, "role": "master", "env": env}, storage=lambda: storage)
    outbox = RecordingOutbox()
    return CheckpointWatcher(lambda: [runner], outbox), outbox


def test_only_steps_the_job_signed_are_reported(object_store, bucket, storage):
    put(object_store, bucket, 1, manifest(1, JOB_KEY))
    put(object_store, bucket, 2, manifest(2, JOB_KEY))
    put(object_store, bucket, 3, manifest(3, None))  # unsigned
    put(object_store, bucket, 4, manifest(4, OTHER_JOBS_KEY))  # another job's key
    put(object_store, bucket, 5, manifest(2, JOB_KEY))  # a genuine manifest replayed as a newer step
    watcher, outbox = watch(storage, bucket, JOB_KEY)

    asyncio.run(watcher.poll())

    assert outbox.reported == [(2, f"s3://{bucket}/jobs/7/checkpoints/step-2")]


def test_each_manifest_is_fetched_once_however_often_the_watcher_polls(object_store, bucket, storage):
    for step in (1, 2, 3):
        put(object_store, bucket, step, manifest(step, JOB_KEY if step != 3 else OTHER_JOBS_KEY))
    watcher, outbox = watch(storage, bucket, JOB_KEY)

    for _ in range(3):
        asyncio.run(watcher.poll())
    gets_for_three = storage.client.gets
    put(object_store, bucket, 4, manifest(4, JOB_KEY))
    asyncio.run(watcher.poll())

    assert gets_for_three == 3 and storage.client.gets == 4
    assert [step for step, _ in outbox.reported] == [2, 4]


def test_a_placement_without_a_key_reports_the_newest_complete_step_as_before(object_store, bucket, storage):
    put(object_store, bucket, 1, manifest(1, None))
    put(object_store, bucket, 2, manifest(2, OTHER_JOBS_KEY))
    watcher, outbox = watch(storage, bucket, None)

    asyncio.run(watcher.poll())

    assert [step for step, _ in outbox.reported] == [2] and storage.client.gets == 0


def test_a_step_the_library_signed_and_mirrored_is_reported(tmp_path, object_store, bucket, storage, monkeypatch):
    from nodeagent.tests.checkpoint_scripts import support

    support.vendor_on_path()
    import torch
    from concurrent_checkpoint import CheckpointEngine

    for name, value in object_store.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CHECKPOINT_S3_URL", f"s3://{bucket}/jobs/7/checkpoints")
    monkeypatch.setenv("CHECKPOINT_SIGNING_KEY", JOB_KEY.hex())
    with CheckpointEngine(tmp_path) as engine:
        engine.save(3, {"w": torch.ones(8)})
    watcher, outbox = watch(storage, bucket, JOB_KEY)

    asyncio.run(watcher.poll())

    assert [step for step, _ in outbox.reported] == [3]


def test_the_agent_checks_manifests_without_importing_torch():
    code = ("import sys, nodeagent.checkpoints, nodeagent.checkpoint_trust; "
            "sys.exit('torch imported' if 'torch' in sys.modules else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr
