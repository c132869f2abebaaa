"""The account page and the API show a user their own storage space and nobody else's; keys
rotate; a file uploaded through the console lands in the user's bucket with their own keys."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from console.lib.audit import AuditAction, AuditEvent
from jobs.storage.models import StorageSpace, bucket_name

from .factories import api_client
from .storage import client_with

pytestmark = pytest.mark.django_db

API = "/api/v1/account/storage/"


def test_the_page_shows_ones_own_space_but_not_the_secret(alice, bob, alice_client, object_storage_settings, object_store):
    html = alice_client.get("/account/").content.decode()
    space = StorageSpace.objects.get(pk=alice.pk)
    assert f'<code id="storage-bucket">{bucket_name(alice.pk)}</code>' in html
    assert f'<code id="storage-access-key">{space.access_key}</code>' in html
    assert f'<code id="storage-endpoint">{object_store.endpoint}</code>' in html
    assert space.secret_key not in html  # fetched from the API on a click, not sent with the page
    assert f"aws --endpoint-url {object_store.endpoint} s3 cp train.py s3://{space.bucket}/uploads/train.py" in html
    assert object_store.secret_key not in html and f"AWS_ACCESS_KEY_ID={object_store.access_key} " not in html
    assert bucket_name(bob.pk) not in html


def test_each_user_sees_only_their_own_keys(alice, carol, bob, object_storage_settings):
    answers = {user.username: api_client(user).get(API) for user in (alice, carol, bob)}
    assert all(a.status_code == 200 for a in answers.values())
    for user in (alice, carol, bob):
        body, space = answers[user.username].json(), StorageSpace.objects.get(pk=user.pk)
        assert body == {"endpoint_url": object_storage_settings.S3_ENDPOINT_URL, "bucket": bucket_name(user.pk),
                        "access_key": space.access_key, "secret_key": space.secret_key, "rotated_at": None}
    assert len({a.json()["access_key"] for a in answers.values()}) == 3  # the teammate's are her own too


def test_nobody_signed_in_gets_nothing(object_storage_settings):
    assert Client().get("/account/").status_code == 302
    assert Client().get(API).status_code == 401
    assert Client().post(f"{API}rotate/").status_code == 401


def test_rotation_through_the_api_answers_new_keys_and_the_old_ones_die(alice, object_storage_settings, object_store):
    api = api_client(alice)
    old = api.get(API).json()
    new = api.post(f"{API}rotate/").json()
    assert new["access_key"] != old["access_key"] and new["rotated_at"] and new["bucket"] == old["bucket"]
    old_client = client_with(object_store.endpoint, old["access_key"], old["secret_key"])
    new_client = client_with(object_store.endpoint, new["access_key"], new["secret_key"])
    new_client.put_object(Bucket=new["bucket"], Key="uploads/x", Body=b"x")
    with pytest.raises(Exception, match="InvalidAccessKeyId"):
        old_client.get_object(Bucket=old["bucket"], Key="uploads/x")
    assert api.get(API).json()["access_key"] == new["access_key"]
    assert AuditEvent.objects.filter(action=AuditAction.USER_KEYS_ROTATED, actor=alice).count() == 1


def test_rotation_on_the_page_is_a_post_that_says_what_happened(alice, alice_client, object_storage_settings):
    alice_client.get("/account/")
    before = StorageSpace.objects.get(pk=alice.pk).access_key
    assert alice_client.get("/account/storage/rotate/").status_code == 405
    page = alice_client.post("/account/storage/rotate/", follow=True).content.decode()
    after = StorageSpace.objects.get(pk=alice.pk).access_key
    assert after != before and f"New keys issued (access key {after}); the old ones no longer work." in page


def test_an_upload_lands_in_ones_own_bucket_under_uploads(alice, alice_client, object_storage_settings, object_store):
    answer = alice_client.post("/account/storage/upload/", {
        "file": SimpleUploadedFile("train.py", b"print('hi')\n"), "key": "experiments/train.py",
    }, HTTP_ACCEPT="application/json")
    url = f"s3://{bucket_name(alice.pk)}/uploads/experiments/train.py"
    assert answer.status_code == 201 and answer.json() == {"url": url}
    space = StorageSpace.objects.get(pk=alice.pk)
    body = client_with(object_store.endpoint, space.access_key, space.secret_key).get_object(
        Bucket=space.bucket, Key="uploads/experiments/train.py")["Body"].read()
    assert body == b"print('hi')\n"
    # without a name the file's own; a plain form post gets the page with the URL to paste
    page = alice_client.post("/account/storage/upload/", {"file": SimpleUploadedFile("data.csv", b"a,b\n")}, follow=True)
    assert f"Uploaded s3://{space.bucket}/uploads/data.csv: use it as the training script URL of a job." in page.content.decode()


@pytest.mark.parametrize(("key", "message"), [
    ("../../other/x.py", "Use a plain relative path without '..' or '//'."),
    ("a//b.py", "Use a plain relative path without '..' or '//'."),
    ("dir/", "Name the object (e.g. train.py or experiments/train.py)."),
    ("weird$name.py", "Use letters, digits, '.', '_', '-', ' ' and '/' only (at most 512 characters)."),
])
def test_an_upload_name_that_would_leave_uploads_is_refused(alice_client, object_storage_settings, key, message):
    answer = alice_client.post("/account/storage/upload/", {"file": SimpleUploadedFile("x.py", b"x"), "key": key},
                               HTTP_ACCEPT="application/json")
    assert answer.status_code == 400 and answer.json() == {"error": message}


def test_an_upload_over_the_limit_is_refused(alice_client, object_storage_settings):
    object_storage_settings.STORAGE_UPLOAD_MAX_MB = 1
    answer = alice_client.post("/account/storage/upload/", {"file": SimpleUploadedFile("big.bin", b"x" * (1024 * 1024 + 1))},
                               HTTP_ACCEPT="application/json")
    assert answer.status_code == 413
    assert answer.json() == {"error": "The file is larger than 1 MB, the most one upload may carry."}


def test_without_object_storage_the_page_and_the_api_say_so(alice, alice_client, settings):
    settings.S3_ENDPOINT_URL = ""
    assert "This console has no object storage" in alice_client.get("/account/").content.decode()
    assert api_client(alice).get(API).status_code == 404
    assert not StorageSpace.objects.exists()


def test_the_header_names_the_user_and_leads_to_the_account_page(alice_client, settings):
    settings.S3_ENDPOINT_URL = ""
    html = alice_client.get("/").content.decode()
    assert '<a class="who" href="/account/"' in html
