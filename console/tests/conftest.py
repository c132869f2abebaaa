"""Personas of the console tests (the same users as the jobs tests)."""

from __future__ import annotations

import pytest
from django.test import Client

from jobs.tests.factories import UserFactory


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Hash test passwords cheaply: the real hasher costs ~0.3 s a user on a small CI machine."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def alice(db):
    """A user of the console."""
    return UserFactory(username="alice")


@pytest.fixture
def bob(db):
    """Another user, whose jobs Alice must not see."""
    return UserFactory(username="bob")


@pytest.fixture
def alice_client(alice) -> Client:
    """A browser session logged in as Alice."""
    client = Client()
    client.force_login(alice)
    return client
