"""A job created from another job's checkpoint (`from_checkpoint`, issue 33 item 7).

The source's newest durable checkpoint is copied into the new job's own checkpoint prefix,
its manifest re-signed with the new job's key, so the new job's nodes trust it (and would
refuse the source's manifest as it was) and its first attempt starts from its step
(CKPT_LAST_STEP), as after a failover. Real SeaweedFS, the owner's own keys.
"""

from __future__ import annotations

import hashlib
import json
import time

import pytest
from django.urls import reverse

from jobs.models import JobAttempt, TrainingJob
from jobs.nodes import desired
from jobs.storage import checkpoint_copy
from jobs.storage.credentials import checkpoint_signing_key
from jobs.storage.models import bucket_name
from jobs.tasks import copy_start_checkpoint, schedule_jobs
from nodeagent.checkpoint_trust import TrustedSteps, signing
from nodeagent.storage import S3Settings, Storage

from .factories import api_payload, form_post
from .storage import space_client
from .test_nodes import make_node

JOBS = "/api/v1/training-jobs/"
SHARD = b"\x00weights\x01" * 1000


def _manifest(step: int, key: str) -> bytes:
    entry = {"name": "rank-00000.shard", "rank": 0, "bytes": len(SHARD), "crc32": 0, "raw_bytes": len(SHARD),
             "kind": "shard", "sha256": [[len(SHARD), hashlib.sha256(SHARD).hexdigest()]]}
    body = {"step": step, "world_size": 1, "time": "2026-12-04T00:00:00Z", "created": time.time(),
            "files": [entry], "metadata": {}, "format": 2}
    return json.dumps(signing.sign(body, bytes.fromhex(key)), indent=1).encode()


@pytest.fixture
def finished(alice, make_job, object_storage_settings, object_store) -> TrainingJob:
    """Alice's job that committed checkpoints 20 and 40 (signed with its own key) and completed."""
    source = make_job(name="finished")
    client, space = space_client(alice, object_store.endpoint)
    for step in (20, 40):
        prefix = f"jobs/{source.pk}/checkpoints/step-{step}/"
        client.put_object(Bucket=space.bucket, Key=prefix + "rank-00000.shard", Body=SHARD)
        client.put_object(Bucket=space.bucket, Key=prefix + "MANIFEST.json", Body=_manifest(step, checkpoint_signing_key(source.pk)))
    TrainingJob.objects.filter(pk=source.pk).update(
        status="Completed", checkpoint_step=40, checkpoint_url=f"s3://{space.bucket}/jobs/{source.pk}/checkpoints/step-40")
    return source


def test_a_job_from_a_checkpoint_waits_for_its_own_signed_copy_then_starts_at_the_sources_step(
        alice, alice_api, finished, object_store):
    node = make_node("gpu-01")
    created = alice_api.post(JOBS, api_payload(name="resumed", from_checkpoint=finished.pk), format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["from_checkpoint"] == finished.pk and created.json()["checkpoint_step"] is None
    job = TrainingJob.objects.get(pk=created.json()["id"])
    assert job.status_reason == f"Copying checkpoint step 40 of job {finished.pk} (finished)"
    assert job.status_changes.get().reason == f"Created to start from checkpoint step 40 of job {finished.pk} (finished)"
    schedule_jobs()
    assert not JobAttempt.objects.filter(job=job).exists()  # a free node, but no copy yet: not placed

    assert copy_start_checkpoint(job.pk) == "copied"
    job.refresh_from_db()
    bucket = bucket_name(alice.pk)
    assert (job.from_checkpoint_id, job.checkpoint_step) == (finished.pk, 40)
    assert job.checkpoint_url == f"s3://{bucket}/jobs/{job.pk}/checkpoints/step-40"
    assert copy_start_checkpoint(job.pk) == "nothing to do"  # twice is once

    # the node's own check (the agent's) trusts the copy with the new job's key; only step 40 was copied
    client, _ = space_client(alice, object_store.endpoint)
    storage = Storage(S3Settings(object_store.endpoint, "", ""), client=client)
    url = f"s3://{bucket}/jobs/{job.pk}/checkpoints"
    assert TrustedSteps().steps(storage, url, {signing.ENV_KEY: checkpoint_signing_key(job.pk)}) == [40]
    assert TrustedSteps().steps(storage, url, {signing.ENV_KEY: checkpoint_signing_key(finished.pk)}) == []
    copied = client.get_object(Bucket=bucket, Key=f"jobs/{job.pk}/checkpoints/step-40/rank-00000.shard")["Body"].read()
    assert copied == SHARD

    schedule_jobs()
    assert JobAttempt.objects.get(job=job).resume_step == 40
    placement = desired.desired_placements(node.pk)[0]
    assert placement["resume_step"] == 40  # the agent sets CKPT_LAST_STEP=40
    assert placement["env"]["CHECKPOINT_S3_URL"] == url


def test_the_form_starts_from_a_checkpoint_too(alice, alice_client, finished):
    response = alice_client.post(reverse("jobs:create"), form_post(name="resumed", from_checkpoint=str(finished.pk)))
    assert response.status_code == 302
    job = TrainingJob.objects.get(name="resumed")
    assert (job.from_checkpoint_id, job.from_checkpoint_step) == (finished.pk, 40)


def _created(alice_api, finished) -> TrainingJob:
    created = alice_api.post(JOBS, api_payload(name="resumed", from_checkpoint=finished.pk), format="json")
    assert created.status_code == 201, created.json()
    return TrainingJob.objects.get(pk=created.json()["id"])


def test_a_checkpoint_gone_from_storage_fails_the_job_with_why(alice, alice_api, finished, object_store):
    job = _created(alice_api, finished)
    client, space = space_client(alice, object_store.endpoint)
    client.delete_object(Bucket=space.bucket, Key=f"jobs/{finished.pk}/checkpoints/step-40/MANIFEST.json")
    assert copy_start_checkpoint(job.pk) == "failed"
    job.refresh_from_db()
    assert job.status == "Failed"
    assert job.status_reason == (f"Could not start from the checkpoint: The checkpoint of job {finished.pk} (step 40) "
                                 "is no longer in your storage.")


def test_a_manifest_the_source_did_not_sign_is_not_copied(alice, alice_api, finished, object_store):
    job = _created(alice_api, finished)
    client, space = space_client(alice, object_store.endpoint)
    planted = _manifest(40, "11" * 32)  # signed with a key that is not the source job's
    client.put_object(Bucket=space.bucket, Key=f"jobs/{finished.pk}/checkpoints/step-40/MANIFEST.json", Body=planted)
    assert copy_start_checkpoint(job.pk) == "failed"
    job.refresh_from_db()
    assert job.status == "Failed" and f"The checkpoint of job {finished.pk} (step 40) cannot be trusted" in job.status_reason
    assert not client.list_objects_v2(Bucket=space.bucket, Prefix=f"jobs/{job.pk}/checkpoints/MANIFEST").get("KeyCount")


def test_a_source_deleted_before_the_copy_fails_the_job(alice_api, finished):
    job = _created(alice_api, finished)
    TrainingJob.objects.filter(pk=finished.pk).delete()
    assert copy_start_checkpoint(job.pk) == "failed"
    job.refresh_from_db()
    assert job.status == "Failed" and "was deleted before the checkpoint was copied" in job.status_reason


def test_a_job_stopped_while_it_waits_for_its_copy_stays_stopped(alice_api, finished):
    job = _created(alice_api, finished)
    assert alice_api.post(f"{JOBS}{job.pk}/stop/").status_code == 200
    assert copy_start_checkpoint(job.pk) == "nothing to do"
    job.refresh_from_db()
    assert job.status == "Stopped" and job.checkpoint_step is None


def test_resign_verifies_with_the_source_key_and_signs_with_the_target_key():
    source, target = "aa" * 32, "bb" * 32
    resigned = checkpoint_copy.resign(_manifest(7, source), 7, bytes.fromhex(source), bytes.fromhex(target))
    assert signing.check(resigned, bytes.fromhex(target), 7)["step"] == 7
    with pytest.raises(signing.UntrustedManifest):
        signing.check(resigned, bytes.fromhex(source), 7)
    with pytest.raises(signing.UntrustedManifest):  # a manifest for another step than its directory's
        checkpoint_copy.resign(_manifest(7, source), 8, bytes.fromhex(source), bytes.fromhex(target))
