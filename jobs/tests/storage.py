"""Test helpers for tenant storage: a user's own space and keys, in the suite's real SeaweedFS."""

from __future__ import annotations

import contextlib
from typing import Any

import boto3
from botocore.config import Config

from jobs.storage.spaces import ensure_space


def client_with(endpoint: str, access_key: str, secret_key: str) -> Any:
    """A fresh S3 client with these keys (no retries: a refusal is the answer under test)."""
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access_key, aws_secret_access_key=secret_key,
                        region_name="us-east-1", config=Config(retries={"max_attempts": 1}))


def space_client(user, endpoint: str) -> tuple[Any, Any]:
    """(an S3 client with the user's own keys, their provisioned space)."""
    space = ensure_space(user.pk)
    return client_with(endpoint, space.access_key, space.secret_key), space


def put_in_space(user, endpoint: str, key: str, body: bytes) -> str:
    """Upload `body` to `key` of the user's own bucket with their own keys; returns its s3:// URL."""
    client, space = space_client(user, endpoint)
    client.put_object(Bucket=space.bucket, Key=key, Body=body)
    return f"s3://{space.bucket}/{key}"


def forget_identities(store) -> None:
    """Delete every identity but the console's: SeaweedFS rewrites them all on each IAM write, so
    a session that kept every test's users would slow down test by test."""
    iam = boto3.client("iam", endpoint_url=store.endpoint, aws_access_key_id=store.access_key,
                       aws_secret_access_key=store.secret_key, region_name="us-east-1")
    for user in iam.list_users().get("Users", []):
        if user["UserName"].startswith(("user-", "job-")):
            with contextlib.suppress(Exception):  # removed meanwhile by a sweep of the stack under test
                iam.delete_user(UserName=user["UserName"])
