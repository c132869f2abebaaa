"""A storage space in the suite's real SeaweedFS (object_store, the root conftest's), as the
console's GET /api/v1/account/storage/ would hand it out: an endpoint, a bucket and keys."""

from __future__ import annotations

import secrets

import pytest

from simpleai.storage import Space


@pytest.fixture(autouse=True)
def own_cache(tmp_path_factory, monkeypatch):
    """What the CLI remembers of packed projects and hashed inputs stays in the test's directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture
def space(object_store) -> Space:
    bucket = f"simpleai-cli-{secrets.token_hex(4)}"
    object_store.client().create_bucket(Bucket=bucket)
    return Space(object_store.endpoint, bucket, object_store.access_key, object_store.secret_key)


def storage_answer(space: Space) -> dict:
    return {"endpoint_url": space.endpoint_url, "bucket": space.bucket, "access_key": space.access_key,
            "secret_key": space.secret_key, "rotated_at": None}
