"""Each attempt gets object-storage keys of its own when it is created: they read the owner's
space, write only the job's prefix, and stop working once the attempt holds no placement. The
placement carries them (and the job's checkpoint signing key), never the console's keys.
Real SeaweedFS; the attempts are made and ended through the actions."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError
from django.utils import timezone

from console.lib import crypto
from console.lib.audit import AuditAction, AuditEvent
from console.services.ports import free_port
from jobs import actions, lifecycle
from jobs.lifecycle import PlacementReport
from jobs.models import JobAttempt, Node, NodeGPU, ReadyAttemptKey, ServerType, TrainingJob
from jobs.nodes import desired
from jobs.scheduling.decision import Assignment
from jobs.storage import credentials, iam
from jobs.storage.credentials import checkpoint_signing_key, identity_name
from jobs.storage.models import bucket_name
from nodeagent import protocol

from .factories import job_fields
from .storage import client_with, put_in_space

pytestmark = pytest.mark.django_db


def make_node(name: str = "gpu-01") -> Node:
    node = Node.objects.create(name=name, server_type=ServerType.objects.get(name="g2"), address="127.0.0.1",
                               connected=True, last_heartbeat_at=timezone.now())
    NodeGPU.objects.bulk_create([NodeGPU(node=node, index=i, uuid=f"{name}-{i}", model="H100", memory_gb=80) for i in range(8)])
    return node


def started(owner, node: Node, **fields) -> tuple[TrainingJob, protocol.Placement]:
    """A job of `owner` with its first attempt placed on `node`; the placement the agent is sent."""
    job = actions.create_job(owner, job_fields(**fields), [])
    assert lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))]) is not None
    [placement] = desired.desired_placements(node.pk)
    return job, placement


def refused(call) -> str:
    with pytest.raises(ClientError) as caught:
        call()
    return caught.value.response["Error"]["Code"]


def keys_of(placement: protocol.Placement, endpoint: str):
    storage = placement["storage"]
    return client_with(endpoint, storage["access_key"], storage["secret_key"])


def test_the_placement_carries_the_attempts_own_keys_and_never_the_consoles(alice, object_storage_settings, object_store):
    job, placement = started(alice, make_node())
    bucket = bucket_name(alice.pk)
    attempt = JobAttempt.objects.get(job=job, number=1)
    storage, env = placement["storage"], placement["env"]

    assert storage["bucket"] == bucket and storage["endpoint_url"] == object_store.endpoint
    assert storage["access_key"] == attempt.storage_access_key and attempt.storage_revoked_at is None
    assert storage["secret_key"] not in attempt.storage_secret_encrypted  # stored encrypted
    assert {env["S3_ACCESS_KEY"], env["AWS_ACCESS_KEY_ID"]} == {storage["access_key"]}
    assert {env["S3_SECRET_KEY"], env["AWS_SECRET_ACCESS_KEY"]} == {storage["secret_key"]}
    assert env["S3_ENDPOINT_URL"] == env["AWS_ENDPOINT_URL_S3"] == object_store.endpoint
    assert env["SIMPLEAI_BUCKET"] == bucket
    assert env["CHECKPOINT_S3_URL"] == f"s3://{bucket}/jobs/{job.pk}/checkpoints"
    assert env["CHECKPOINT_SIGNING_KEY"] == checkpoint_signing_key(job.pk)
    assert placement["output_prefix"] == f"s3://{bucket}/jobs/{job.pk}/attempt-1"
    assert placement["tenant"] == {"id": alice.pk, "name": "alice"}
    # the console's own keys are nowhere in what the node is sent
    values = [*env.values(), *storage.values()]
    assert object_store.access_key not in values and object_store.secret_key not in json.dumps(placement)
    [issued] = AuditEvent.objects.filter(action=AuditAction.ATTEMPT_KEYS_ISSUED)
    assert (issued.target, issued.actor, issued.actor_name) == (identity_name(job.pk, 1), alice, "alice")
    assert storage["secret_key"] not in issued.detail


def test_attempt_keys_read_the_owners_space_and_write_only_the_jobs_prefix(alice, bob, object_storage_settings, object_store):
    script = put_in_space(alice, object_store.endpoint, "uploads/train.py", b"print(1)")
    put_in_space(bob, object_store.endpoint, "uploads/bob.py", b"bob's")
    job, placement = started(alice, make_node(), script_url=script)
    other, _ = started(alice, make_node("gpu-02"), name="another-job")
    keys, bucket = keys_of(placement, object_store.endpoint), bucket_name(alice.pk)

    assert keys.get_object(Bucket=bucket, Key="uploads/train.py")["Body"].read() == b"print(1)"
    assert "uploads/train.py" in [o["Key"] for o in keys.list_objects_v2(Bucket=bucket)["Contents"]]
    keys.put_object(Bucket=bucket, Key=f"jobs/{job.pk}/checkpoints/step-1/MANIFEST.json", Body=b"{}")
    keys.put_object(Bucket=bucket, Key=f"jobs/{job.pk}/attempt-1/master/model.pt", Body=b"w")
    keys.delete_object(Bucket=bucket, Key=f"jobs/{job.pk}/checkpoints/step-1/MANIFEST.json")

    # another job's prefix of the same owner, her own uploads, and anything of another tenant: refused
    assert refused(lambda: keys.put_object(Bucket=bucket, Key=f"jobs/{other.pk}/checkpoints/step-9/MANIFEST.json", Body=b"x")) == "AccessDenied"
    assert refused(lambda: keys.put_object(Bucket=bucket, Key=f"jobs/{job.pk}0/x", Body=b"x")) == "AccessDenied"
    assert refused(lambda: keys.put_object(Bucket=bucket, Key="uploads/train.py", Body=b"overwritten")) == "AccessDenied"
    assert refused(lambda: keys.delete_object(Bucket=bucket, Key="uploads/train.py")) == "AccessDenied"
    bobs = bucket_name(bob.pk)
    assert refused(lambda: keys.get_object(Bucket=bobs, Key="uploads/bob.py")) == "AccessDenied"
    assert refused(lambda: keys.list_objects_v2(Bucket=bobs)) == "AccessDenied"
    assert refused(lambda: keys.put_object(Bucket=bobs, Key=f"jobs/{job.pk}/x", Body=b"x")) == "AccessDenied"
    assert refused(lambda: keys.create_bucket(Bucket=f"simpleai-u{alice.pk}-x")) == "AccessDenied"


def test_the_keys_stop_working_once_the_attempt_holds_no_placement(alice, object_storage_settings, object_store):
    node = make_node()
    job, placement = started(alice, node)
    keys, bucket = keys_of(placement, object_store.endpoint), bucket_name(alice.pk)
    lifecycle.record_placement(PlacementReport(job.pk, 1, "master", "running"), node.pk)
    assert credentials.sweep().revoked == []  # still running: kept
    keys.put_object(Bucket=bucket, Key=f"jobs/{job.pk}/attempt-1/master/out.txt", Body=b"x")

    lifecycle.record_placement(PlacementReport(job.pk, 1, "master", "exited", exit_code=0), node.pk)
    assert TrainingJob.objects.get(pk=job.pk).status == "Completed"
    assert credentials.sweep().revoked == [identity_name(job.pk, 1)]

    assert refused(lambda: keys.get_object(Bucket=bucket, Key=f"jobs/{job.pk}/attempt-1/master/out.txt")) == "InvalidAccessKeyId"
    assert JobAttempt.objects.get(job=job).storage_revoked_at is not None
    assert AuditEvent.objects.filter(action=AuditAction.ATTEMPT_KEYS_REVOKED, target=identity_name(job.pk, 1), actor=alice).count() == 1
    assert credentials.sweep() == credentials.Swept([], [])  # idempotent: nothing left to do


def test_a_deleted_jobs_identities_are_removed(alice, object_storage_settings):
    node = make_node()
    job, _ = started(alice, node)
    TrainingJob.objects.filter(pk=job.pk).delete()  # its attempts go with it
    assert credentials.sweep().removed == [identity_name(job.pk, 1)]
    assert identity_name(job.pk, 1) not in iam.identity_names("job-")


def test_a_job_waits_when_its_keys_cannot_be_made(alice, object_storage_settings):
    node = make_node()
    job = actions.create_job(alice, job_fields(), [])
    object_storage_settings.S3_ENDPOINT_URL = f"http://127.0.0.1:{free_port()}"
    assert lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))]) is None
    job.refresh_from_db()
    assert job.status == "Pending" and job.current_attempt == 0
    assert job.status_reason == credentials.WAITING_FOR_STORAGE
    assert not JobAttempt.objects.filter(job=job).exists()


def test_without_object_storage_nothing_is_minted_and_nothing_is_carried(alice, settings):
    settings.S3_ENDPOINT_URL = ""
    job, placement = started(alice, make_node())
    assert "storage" not in placement and JobAttempt.objects.get(job=job).storage_access_key == ""
    assert placement["env"] == {"CHECKPOINT_SIGNING_KEY": checkpoint_signing_key(job.pk)}


def test_the_checkpoint_signing_key_is_the_jobs_own(settings):
    first = checkpoint_signing_key(7)
    assert len(first) == 64 and int(first, 16) >= 0
    assert checkpoint_signing_key(7) == first and checkpoint_signing_key(8) != first
    settings.SECRET_KEY = "another console"
    assert checkpoint_signing_key(7) != first


def test_keys_minted_ahead_are_taken_by_the_attempt_without_asking_storage(alice, object_storage_settings, object_store):
    node = make_node()
    job = actions.create_job(alice, job_fields(), [])
    assert credentials.mint_ahead(job.pk) is True
    ahead = ReadyAttemptKey.objects.get(job=job)
    assert credentials.mint_ahead(job.pk) is True  # twice: nothing more
    assert credentials.sweep().removed == []  # a waiting job's keys are not left-overs

    object_storage_settings.S3_ENDPOINT_URL = f"http://127.0.0.1:{free_port()}"  # storage unreachable now
    assert lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))]) is not None
    object_storage_settings.S3_ENDPOINT_URL = object_store.endpoint

    attempt = JobAttempt.objects.get(job=job)
    assert (attempt.storage_access_key, attempt.storage_secret_encrypted) == (ahead.access_key, ahead.secret_encrypted)
    assert not ReadyAttemptKey.objects.exists()
    [placement] = desired.desired_placements(node.pk)
    keys_of(placement, object_store.endpoint).put_object(Bucket=bucket_name(alice.pk), Key=f"jobs/{job.pk}/x", Body=b"x")
    assert credentials.mint_ahead(job.pk) is False  # placed: nothing to mint ahead
    assert AuditEvent.objects.filter(action=AuditAction.ATTEMPT_KEYS_ISSUED, target=identity_name(job.pk, 1)).count() == 1


def test_minting_ahead_takes_over_what_a_rolled_back_run_left(alice, object_storage_settings, object_store):
    job = actions.create_job(alice, job_fields(), [])
    left = ("SAIJLEFTBYAROLLBACK1", "a-secret-a-rolled-back-run-left-behind0")
    iam.create_identity(identity_name(job.pk, 1), iam.attempt_policy(bucket_name(alice.pk), job.pk), *left)

    assert credentials.mint_ahead(job.pk) is True

    ahead = ReadyAttemptKey.objects.get(job=job)
    bucket = bucket_name(alice.pk)
    assert refused(lambda: client_with(object_store.endpoint, *left).list_objects_v2(Bucket=bucket)) == "InvalidAccessKeyId"
    secret = crypto.decrypt(ahead.secret_encrypted)
    client_with(object_store.endpoint, ahead.access_key, secret).put_object(Bucket=bucket, Key=f"jobs/{job.pk}/x", Body=b"x")


def test_keys_minted_ahead_for_a_job_that_stopped_waiting_are_removed(alice, object_storage_settings):
    job = actions.create_job(alice, job_fields(), [])
    assert credentials.mint_ahead(job.pk)
    TrainingJob.objects.filter(pk=job.pk).update(status="Failed")
    assert credentials.sweep().removed == [identity_name(job.pk, 1)]
    assert not ReadyAttemptKey.objects.exists()
