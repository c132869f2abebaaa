"""Each user's storage space: a bucket of their own and keys that reach only it, made in the
suite's real SeaweedFS through its IAM API; rotation; the audit rows. Real boto3 throughout."""

from __future__ import annotations

import boto3
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from console.lib.audit import AuditAction, AuditEvent
from console.services.ports import free_port
from jobs.storage import iam
from jobs.storage.models import StorageSpace, bucket_name
from jobs.storage.spaces import ensure_space, rotate_keys

from .storage import client_with, put_in_space, space_client

pytestmark = pytest.mark.django_db


def refused(call) -> str:
    """The S3 error code of a call that must fail."""
    with pytest.raises(ClientError) as caught:
        call()
    return caught.value.response["Error"]["Code"]


def test_a_users_keys_reach_their_own_bucket_and_nothing_else(alice, bob, object_storage_settings, object_store):
    url = put_in_space(bob, object_store.endpoint, "uploads/bob.py", b"bob's")
    alices, space = space_client(alice, object_store.endpoint)
    assert space.bucket == bucket_name(alice.pk) == f"simpleai-u{alice.pk}"

    alices.put_object(Bucket=space.bucket, Key="uploads/train.py", Body=b"mine")
    assert alices.get_object(Bucket=space.bucket, Key="uploads/train.py")["Body"].read() == b"mine"
    assert [o["Key"] for o in alices.list_objects_v2(Bucket=space.bucket)["Contents"]] == ["uploads/train.py"]
    alices.delete_object(Bucket=space.bucket, Key="uploads/train.py")
    assert [b["Name"] for b in alices.list_buckets()["Buckets"]] == [space.bucket]  # she sees only hers

    bobs_bucket = url.split("/")[2]
    assert refused(lambda: alices.get_object(Bucket=bobs_bucket, Key="uploads/bob.py")) == "AccessDenied"
    assert refused(lambda: alices.list_objects_v2(Bucket=bobs_bucket)) == "AccessDenied"
    assert refused(lambda: alices.put_object(Bucket=bobs_bucket, Key="uploads/bob.py", Body=b"overwritten")) == "AccessDenied"
    assert refused(lambda: alices.delete_object(Bucket=bobs_bucket, Key="uploads/bob.py")) == "AccessDenied"
    assert refused(lambda: alices.create_bucket(Bucket=f"simpleai-u{alice.pk}-more")) == "AccessDenied"
    assert refused(lambda: alices.delete_bucket(Bucket=space.bucket)) == "AccessDenied"
    assert object_store.client().get_object(Bucket=bobs_bucket, Key="uploads/bob.py")["Body"].read() == b"bob's"


def test_her_keys_cannot_make_identities(alice, object_storage_settings, object_store):
    space = ensure_space(alice.pk)
    iam_as_alice = boto3.client("iam", endpoint_url=object_store.endpoint, aws_access_key_id=space.access_key,
                                aws_secret_access_key=space.secret_key, region_name="us-east-1",
                                config=Config(retries={"max_attempts": 1}))
    with pytest.raises(ClientError):
        iam_as_alice.create_user(UserName="user-escalated")
    assert "user-escalated" not in iam.identity_names("user-")


def test_anonymous_requests_are_refused(alice, object_storage_settings, object_store):
    url = put_in_space(alice, object_store.endpoint, "uploads/train.py", b"x")
    anonymous = boto3.client("s3", endpoint_url=object_store.endpoint, region_name="us-east-1",
                             config=Config(signature_version=UNSIGNED, retries={"max_attempts": 1}))
    bucket = url.split("/")[2]
    assert refused(lambda: anonymous.get_object(Bucket=bucket, Key="uploads/train.py")) == "AccessDenied"
    assert refused(lambda: anonymous.list_objects_v2(Bucket=bucket)) == "AccessDenied"
    assert refused(lambda: anonymous.put_object(Bucket=bucket, Key="uploads/x", Body=b"x")) == "AccessDenied"


def test_a_space_is_made_once_and_the_issue_is_audited(alice, object_storage_settings, django_assert_num_queries):
    first = ensure_space(alice.pk)
    with django_assert_num_queries(1):  # made: one indexed read, nothing asked of object storage
        again = ensure_space(alice.pk)
    assert (again.access_key, again.provisioned) == (first.access_key, True)
    [issued] = AuditEvent.objects.filter(action=AuditAction.USER_KEYS_ISSUED)
    assert (issued.actor, issued.actor_name, issued.target) == (alice, "alice", first.bucket)
    assert first.secret_key not in issued.detail and first.secret_key not in StorageSpace.objects.get(pk=alice.pk).secret_key_encrypted


def test_a_space_made_while_storage_was_down_is_provisioned_later_with_the_same_keys(alice, object_storage_settings, object_store):
    object_storage_settings.S3_ENDPOINT_URL = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(iam.StorageUnavailable):
        ensure_space(alice.pk)
    row = StorageSpace.objects.get(pk=alice.pk)
    assert not row.provisioned and not AuditEvent.objects.exists()

    object_storage_settings.S3_ENDPOINT_URL = object_store.endpoint
    space = ensure_space(alice.pk)
    assert space.provisioned and space.access_key == row.access_key
    client = client_with(object_store.endpoint, row.access_key, row.secret_key)
    client.put_object(Bucket=space.bucket, Key="uploads/x", Body=b"x")


def test_rotation_gives_new_keys_and_the_old_ones_stop_working_at_once(alice, object_storage_settings, object_store):
    old = ensure_space(alice.pk)
    old_client = client_with(object_store.endpoint, old.access_key, old.secret_key)
    old_client.put_object(Bucket=old.bucket, Key="uploads/kept.py", Body=b"kept")

    new = rotate_keys(alice)

    assert new.access_key != old.access_key and new.rotated_at is not None
    assert refused(lambda: old_client.get_object(Bucket=old.bucket, Key="uploads/kept.py")) == "InvalidAccessKeyId"
    new_client = client_with(object_store.endpoint, new.access_key, new.secret_key)
    assert new_client.get_object(Bucket=new.bucket, Key="uploads/kept.py")["Body"].read() == b"kept"  # the data stays
    [rotated] = AuditEvent.objects.filter(action=AuditAction.USER_KEYS_ROTATED)
    assert rotated.actor == alice and old.access_key in rotated.detail and new.access_key in rotated.detail
