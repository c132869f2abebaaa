"""Fixtures shared by every app's tests: the personas, and real services started by the suite itself.

Personas (as in healthchecks): Alice owns the jobs and workspaces under test; Carol is on Alice's
team (both are in the group `team`, so a quota set on the group applies to both, yet neither sees
the other's jobs); Bob is the outsider, with no access to Alice's things; `staff` manages
everything in the admin and sees the node pages.
"""

from __future__ import annotations

import time

import pytest
from django.contrib.auth.models import Group
from django.core.management.base import CommandError
from django.db import OperationalError
from django.test import Client, TransactionTestCase
from rest_framework.test import APIClient

from console.lib import live
from console.services.objectstore import ObjectStore, start_seaweedfs
from console.tests.workers import worker_index
from jobs import actions
from jobs.tests.factories import UserFactory, api_client, job_fields, logged_in

# 31 × 1,000 mod 12,768: each next worker's ports are 5,464 further round (master_port's spread)
JOB_IDS_APART = 1000


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every transactional test rolls back by serialization. A flush without it re-creates the
    content types and permissions (Django's post_migrate) under new ids, and the next serialized
    test of that worker then fails to restore its own copy of them (a duplicate key)."""
    for item in items:
        marker = item.get_closest_marker("django_db")
        kwargs = dict(marker.kwargs) if marker is not None else {}
        fixtures = getattr(item, "fixturenames", ())
        if (kwargs.get("transaction") or "transactional_db" in fixtures or "live_server" in fixtures) \
                and not kwargs.get("serialized_rollback"):
            kwargs.update(transaction=True, serialized_rollback=True)
            item.add_marker(pytest.mark.django_db(**kwargs))


@pytest.fixture(scope="session")
def object_store(tmp_path_factory) -> ObjectStore:
    """A real SeaweedFS S3 server on loopback for the whole test session."""
    store = start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
    yield store
    store.stop()


@pytest.fixture
def object_storage_settings(settings, object_store):
    """The console's object storage is the suite's real SeaweedFS (users' spaces are made in it,
    the script check asks it); the identities a test made are deleted after it."""
    from jobs.tests.storage import forget_identities

    settings.S3_ENDPOINT_URL = object_store.endpoint
    settings.S3_ACCESS_KEY = object_store.access_key
    settings.S3_SECRET_KEY = object_store.secret_key
    yield settings
    forget_identities(object_store)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The test database commits without waiting for its write-ahead log to reach the disk (a
    crash of PostgreSQL would lose the last commits of a test run, nothing else; every process
    of the suite, the consoles it starts included, connects with this database's setting).

    Under pytest-xdist each worker has a database of its own; its job ids start apart, so the
    rendezvous ports derived from them (jobs.scheduling.decision.master_port) differ between two jobs of
    two workers training at the same time on this machine. A flush keeps sequences as they are."""
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(f'ALTER DATABASE "{connection.settings_dict["NAME"]}" SET synchronous_commit TO off')
        if index := worker_index():
            cursor.execute("SELECT setval(pg_get_serial_sequence('jobs_trainingjob', 'id'), %s)", [JOB_IDS_APART * index])
    connection.close()  # the next connection takes the database's setting
    yield


@pytest.fixture(scope="session", autouse=True)
def flush_outlasts_a_deadlock():
    """A transactional test ends with one TRUNCATE of every table. In the end-to-end tests the
    stack (Celery beat's ticks, daphne's heartbeat book) keeps writing meanwhile, and PostgreSQL
    may choose the TRUNCATE as the victim of a deadlock: try it again, as a worker would."""
    original = TransactionTestCase._fixture_teardown

    def teardown(self) -> None:
        for attempt in range(5):
            try:
                return original(self)
            except CommandError as error:  # "Database … couldn't be flushed", from the deadlock
                if attempt == 4 or not isinstance(error.__cause__, OperationalError):
                    raise
                time.sleep(0.5)

    TransactionTestCase._fixture_teardown = teardown  # type: ignore[method-assign]
    yield
    TransactionTestCase._fixture_teardown = original  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def live_events_stay_with_their_test():
    """console.lib.live hands events to the loop the last WebSocket came in on. A test stopped by the
    timeout leaves its loop running in a thread; the next tests' events must not go there."""
    yield
    live.detach()


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Hash test passwords cheaply: the real hasher costs ~0.3 s a user on a small CI machine."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


# -- personas ---------------------------------------------------------------------------------------

@pytest.fixture
def alice(db):
    """The owner: the jobs and workspaces under test are hers."""
    return UserFactory(username="alice")


@pytest.fixture
def team(alice):
    """The group `team`, with Alice in it (and Carol, once a test asks for her)."""
    group, _ = Group.objects.get_or_create(name="team")
    alice.groups.add(group)
    return group


@pytest.fixture
def carol(team):
    """Alice's teammate: a quota on `team` applies to her too; Alice's jobs are not hers to see."""
    user = UserFactory(username="carol")
    user.groups.add(team)
    return user


@pytest.fixture
def bob(db):
    """The outsider: another user, with no access to Alice's jobs."""
    return UserFactory(username="bob")


@pytest.fixture
def staff(db):
    """A superuser who manages every model in the Django admin and sees the node pages."""
    return UserFactory(username="staff", is_staff=True, is_superuser=True)


@pytest.fixture
def alice_client(alice) -> Client:
    """A browser session logged in as Alice."""
    return logged_in(alice)


@pytest.fixture
def bob_client(bob) -> Client:
    """A browser session logged in as Bob."""
    return logged_in(bob)


@pytest.fixture
def staff_client(staff) -> Client:
    """A browser session logged in as the staff user."""
    return logged_in(staff)


@pytest.fixture
def alice_api(alice) -> APIClient:
    """An API client that authenticates as Alice with a DRF token (no session)."""
    return api_client(alice)


@pytest.fixture
def bob_api(bob) -> APIClient:
    """An API client that authenticates as Bob with a DRF token."""
    return api_client(bob)


@pytest.fixture
def make_job(alice):
    """Create a job through jobs.actions.create_job: Alice's 1 × g2 job unless told otherwise.

    make_job(name="x", owner=bob, tags=[{"key": "team", "value": "nlp"}], registry_password="s3cret", **fields)
    """

    def make(owner=None, tags=(), registry_password: str = "", **overrides):
        return actions.create_job(owner or alice, job_fields(**overrides), list(tags), registry_password)

    return make

