"""Attempt keys and rolled-back transactions: an identity minted inside a scheduler run that
rolled back is swept, one being made in a concurrent transaction is not (a module of its own:
transactional tests flush the seeded rows; console.tests.workers)."""

from __future__ import annotations

import threading

import pytest
from django.db import connections, transaction

from jobs import actions, lifecycle
from jobs.models import JobAttempt, TrainingJob
from jobs.scheduling.decision import Assignment
from jobs.storage import credentials, iam
from jobs.storage.credentials import identity_name

from .factories import job_fields
from .test_attempt_credentials import make_node


def job_identities(names: list[str]) -> list[str]:
    """The attempts' identities among those a sweep removed (the worker's object store may also hold
    a `user-*` identity an earlier test of the worker left, whose user its flush removed)."""
    return [name for name in names if name.startswith("job-")]


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_an_identity_left_by_a_rolled_back_start_is_removed_and_one_being_made_is_not(alice, object_storage_settings):
    node = make_node()
    job = actions.create_job(alice, job_fields(), [])
    with pytest.raises(RuntimeError), transaction.atomic():
        lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])
        raise RuntimeError("the scheduler run failed after the mint")
    assert identity_name(job.pk, 1) in iam.identity_names("job-")  # minted, its row rolled back

    # a start of the same job in flight in another connection holds its row: left alone
    holding, release = threading.Event(), threading.Event()

    def hold_the_job() -> None:
        with transaction.atomic():
            TrainingJob.objects.select_for_update().get(pk=job.pk)
            holding.set()
            release.wait(10)
        connections.close_all()

    holder = threading.Thread(target=hold_the_job)
    holder.start()
    holding.wait(10)
    try:
        assert job_identities(credentials.sweep().removed) == []
    finally:
        release.set()
        holder.join()
    assert job_identities(credentials.sweep().removed) == [identity_name(job.pk, 1)]
    # and the job starts fine afterwards, with fresh keys
    assert lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))]) is not None
    assert JobAttempt.objects.get(job=job).storage_access_key
