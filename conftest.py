"""Fixtures shared by every app's tests: real services started by the suite itself."""

from __future__ import annotations

import pytest

from console.services.objectstore import ObjectStore, start_seaweedfs


@pytest.fixture(scope="session")
def object_store(tmp_path_factory) -> ObjectStore:
    """A real SeaweedFS S3 server on loopback for the whole test session."""
    store = start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
    yield store
    store.stop()
