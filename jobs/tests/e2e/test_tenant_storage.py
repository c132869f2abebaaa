"""Tenant storage end to end: a real job of Alice's, run by a real agent, uses the credentials
its placement brought — they read her space and write only the job's own prefix, reach nothing
of another job or tenant — and stop working once the attempt has ended."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from console.lib import crypto
from jobs.models import JobAttempt
from jobs.storage.models import bucket_name
from jobs.tests.storage import client_with, put_in_space, space_client

from .helpers import create_job, stream_text, wait_for_status
from .stack import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_a_jobs_own_keys_reach_only_its_own_data_and_die_with_the_attempt(
        alice, bob, start_nodes, upload_script, object_store, e2e_settings):
    start_nodes("node-a", "node-b")
    put_in_space(bob, object_store.endpoint, "uploads/bob.py", b"bob's")
    other = create_job(alice, "other-job", "sleep 1")
    script = upload_script("storage_probe.py")
    job = create_job(alice, "probe", f"python storage_probe.py {other.pk} {bucket_name(bob.pk)}", script_url=script)

    job = wait_for_status(job.pk, "Completed", "Failed", timeout=120)

    assert job.status == "Completed", job.status_reason
    lines = [line for line in stream_text(job.pk, "master") if line.startswith("PROBE ")]
    attempt = JobAttempt.objects.get(job=job, number=1)
    assert f"PROBE key {attempt.storage_access_key}" in lines  # its own, not the console's
    assert {"PROBE read-own-script ok", "PROBE list-own-bucket ok", "PROBE write-own-prefix ok"} <= set(lines), lines
    for refused in ("write-other-job", "overwrite-upload", "read-other-tenant", "write-other-tenant", "create-bucket"):
        assert f"PROBE {refused} refused AccessDenied" in lines, (refused, lines)
    assert f"PROBE buckets {bucket_name(alice.pk)}" in lines
    alices, space = space_client(alice, object_store.endpoint)
    assert alices.get_object(Bucket=space.bucket, Key=f"jobs/{job.pk}/probe.txt")["Body"].read() == b"mine"
    assert alices.get_object(Bucket=space.bucket, Key="uploads/storage_probe.py")["Body"].read() != b"planted"

    # the attempt ended: its keys are revoked by the sweep its end asked for
    keys = client_with(object_store.endpoint, attempt.storage_access_key, crypto.decrypt(attempt.storage_secret_encrypted))

    def refused_now() -> bool:
        try:
            keys.list_objects_v2(Bucket=space.bucket)
        except ClientError as error:
            return error.response["Error"]["Code"] == "InvalidAccessKeyId"
        return False

    wait_until(refused_now, timeout=60, message="the ended attempt's keys to stop working")
    assert JobAttempt.objects.get(pk=attempt.pk).storage_revoked_at is not None
