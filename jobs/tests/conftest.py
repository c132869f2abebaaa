"""Fixtures of the jobs tests (the personas, make_job and object storage are the root conftest's)."""

from __future__ import annotations

import contextlib

import pytest


@pytest.fixture
def stored_script(object_storage_settings, object_store) -> str:
    """s3://scripts/train.py, uploaded to the console's object storage; returns the URL."""
    client = object_store.client()
    with contextlib.suppress(Exception):  # the bucket exists already (SeaweedFS answers either error)
        client.create_bucket(Bucket="scripts")
    client.put_object(Bucket="scripts", Key="train.py", Body=b"print('training')\n")
    return "s3://scripts/train.py"


@pytest.fixture
def listening_console(db):
    """The console has processed heartbeats for an hour without a gap: the watchdog may judge."""
    from django.utils import timezone

    from jobs.models import ConsoleListening

    now = timezone.now()
    return ConsoleListening.objects.update_or_create(
        pk=1, defaults={"alive_at": now, "listening_since": now - timezone.timedelta(hours=1)},
    )[0]
