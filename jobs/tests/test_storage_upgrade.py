"""The upgrade to storage spaces on a database that has users and jobs already: the migration
gives every user a space row, and `manage.py storage_spaces --provision-all` provisions them and
moves what existing jobs own into their owners' buckets, so their owners' keys read it."""

from __future__ import annotations

import contextlib
import importlib
import io

import pytest
from django.apps import apps as django_apps
from django.core.management import call_command

from jobs import actions
from jobs.models import JobAttempt, Placement, TrainingJob
from jobs.storage.models import StorageSpace, bucket_name

from .factories import UserFactory, job_fields
from .storage import client_with


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_the_migration_gives_every_existing_user_a_space_row():
    """The data step of jobs 0015, run as the migration runs it, on users who have no space yet (run on
    today's schema: rewinding the shared test database's schema broke the tests after this one)."""
    upgrade = importlib.import_module("jobs.migrations.0015_a_storage_space_for_every_user")
    users = [UserFactory(username=f"old-{i}") for i in range(3)]
    actions.create_job(users[0], job_fields(), [])
    StorageSpace.objects.filter(user__in=users).delete()  # as before the upgrade: no space rows
    upgrade.give_spaces(django_apps, None)
    spaces = {space.user_id: space for space in StorageSpace.objects.filter(user__in=users)}
    assert set(spaces) == {user.pk for user in users}
    for user in users:
        space = spaces[user.pk]
        assert space.bucket == bucket_name(user.pk) and not space.provisioned
        assert space.access_key.startswith("SAIU") and len(space.secret_key) == 40
    assert len({space.access_key for space in spaces.values()}) == 3


def _old_job(owner, name: str, results: str, script: str) -> TrainingJob:
    """A job as the console before storage spaces left it: results in the shared bucket."""
    job = actions.create_job(owner, job_fields(name=name, script_url=script), [])
    attempt = JobAttempt.objects.create(job=job, number=1, master_addr="127.0.0.1", master_port=29500)
    Placement.objects.create(attempt=attempt, node_name="n1", role="master", node_rank=0, state="exited",
                             output_url=f"s3://{results}/jobs/{job.pk}/attempt-1/master")
    TrainingJob.objects.filter(pk=job.pk).update(
        status="Completed", current_attempt=1, result_url=f"s3://{results}/jobs/{job.pk}/attempt-1/",
        checkpoint_step=5, checkpoint_url=f"s3://{results}/jobs/{job.pk}/checkpoints/step-5",
    )
    return TrainingJob.objects.get(pk=job.pk)


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_provision_all_moves_existing_jobs_data_into_their_owners_buckets(alice, bob, object_storage_settings, object_store):
    results = object_storage_settings.S3_RESULTS_BUCKET
    admin = object_store.client()
    for bucket in (results, "scripts"):
        with contextlib.suppress(Exception):  # another test made it
            admin.create_bucket(Bucket=bucket)
    admin.put_object(Bucket="scripts", Key="team/train.py", Body=b"print('old')\n")
    alices = _old_job(alice, "old-a", results, "s3://scripts/team/train.py")
    bobs = _old_job(bob, "old-b", results, "s3://scripts/gone.py")  # deleted before the upgrade
    for job in (alices, bobs):
        admin.put_object(Bucket=results, Key=f"jobs/{job.pk}/attempt-1/master/model.pt", Body=b"w")
        admin.put_object(Bucket=results, Key=f"jobs/{job.pk}/checkpoints/step-5/MANIFEST.json", Body=b"{}")

    out = io.StringIO()
    call_command("storage_spaces", "--provision-all", stdout=out)
    assert "2 job(s)' results and 1 script(s) moved" in out.getvalue()
    assert "not found, left as it was: s3://scripts/gone.py" in out.getvalue()

    alices.refresh_from_db()
    bucket = bucket_name(alice.pk)
    assert alices.script_url == f"s3://{bucket}/uploads/legacy/scripts/team/train.py"
    assert alices.result_url == f"s3://{bucket}/jobs/{alices.pk}/attempt-1/"
    assert alices.checkpoint_url == f"s3://{bucket}/jobs/{alices.pk}/checkpoints/step-5"
    assert Placement.objects.get(attempt__job=alices).output_url == f"s3://{bucket}/jobs/{alices.pk}/attempt-1/master"
    space = StorageSpace.objects.get(pk=alice.pk)
    mine = client_with(object_store.endpoint, space.access_key, space.secret_key)  # her own keys read it all
    assert mine.get_object(Bucket=bucket, Key="uploads/legacy/scripts/team/train.py")["Body"].read() == b"print('old')\n"
    assert mine.get_object(Bucket=bucket, Key=f"jobs/{alices.pk}/attempt-1/master/model.pt")["Body"].read() == b"w"
    assert mine.get_object(Bucket=bucket, Key=f"jobs/{alices.pk}/checkpoints/step-5/MANIFEST.json")["Body"].read() == b"{}"
    bobs.refresh_from_db()
    assert bobs.script_url == "s3://scripts/gone.py" and bobs.result_url.startswith(f"s3://{bucket_name(bob.pk)}/")

    again = io.StringIO()
    call_command("storage_spaces", "--provision-all", stdout=again)  # make run runs it at every start
    assert "0 made, 0 provisioned; 0 job(s)' results and 0 script(s) moved" in again.getvalue()
