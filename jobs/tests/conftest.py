"""Personas and helpers of the jobs tests.

Alice owns jobs, Bob is another user (the outsider: her jobs do not exist for him),
and `staff` manages everything in the Django admin.
"""

from __future__ import annotations

import contextlib

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from jobs import actions

from .factories import UserFactory, job_fields


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Hash test passwords cheaply: the real hasher costs ~0.3 s a user on a small CI machine."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def alice(db):
    """The owner: the jobs under test are hers."""
    return UserFactory(username="alice")


@pytest.fixture
def bob(db):
    """Another user, with no access to Alice's jobs."""
    return UserFactory(username="bob")


@pytest.fixture
def staff(db):
    """A superuser who manages every model in the Django admin."""
    return UserFactory(username="staff", is_staff=True, is_superuser=True)


def _logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def alice_client(alice) -> Client:
    """A browser session logged in as Alice."""
    return _logged_in(alice)


@pytest.fixture
def bob_client(bob) -> Client:
    """A browser session logged in as Bob."""
    return _logged_in(bob)


@pytest.fixture
def staff_client(staff) -> Client:
    """A browser session logged in as the staff user."""
    return _logged_in(staff)


@pytest.fixture
def alice_api(alice) -> APIClient:
    """An API client that authenticates as Alice with a DRF token (no session)."""
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=alice)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def bob_api(bob) -> APIClient:
    """An API client that authenticates as Bob with a DRF token."""
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=bob)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def make_job(alice):
    """Create a job through jobs.actions.create_job: Alice's 1 × g2 job unless told otherwise.

    make_job(name="x", owner=bob, tags=[{"key": "team", "value": "nlp"}], registry_password="s3cret", **fields)
    """

    def make(owner=None, tags=(), registry_password: str = "", **overrides):
        return actions.create_job(owner or alice, job_fields(**overrides), list(tags), registry_password)

    return make


@pytest.fixture
def object_storage_settings(settings, object_store):
    """The console's object storage is the suite's real SeaweedFS (what the script check asks)."""
    settings.S3_ENDPOINT_URL = object_store.endpoint
    settings.S3_ACCESS_KEY = object_store.access_key
    settings.S3_SECRET_KEY = object_store.secret_key
    return settings


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
