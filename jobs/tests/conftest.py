"""Fixtures of the jobs tests (the personas, make_job and object storage are the root conftest's)."""

from __future__ import annotations

import pytest

from .storage import put_in_space


@pytest.fixture
def stored_script(alice, object_storage_settings, object_store) -> str:
    """uploads/train.py in Alice's own storage space, uploaded with her own keys; returns its URL."""
    return put_in_space(alice, object_store.endpoint, "uploads/train.py", b"print('training')\n")


@pytest.fixture
def listening_console(db):
    """The console has processed heartbeats for an hour without a gap: the watchdog may judge."""
    from django.utils import timezone

    from jobs.models import ConsoleListening

    now = timezone.now()
    return ConsoleListening.objects.update_or_create(
        pk=1, defaults={"alive_at": now, "listening_since": now - timezone.timedelta(hours=1)},
    )[0]
