"""SeaweedFS identities through its embedded IAM API (boto3 `iam` at the S3 endpoint), and the
console's admin S3 client: the one place that uses the console's own keys.

Plain functions, one round trip each where possible. SeaweedFS must run with
`-s3.iam.readOnly=false` (console.services.objectstore). Measured on 4.48: reads are ~2 ms;
every write rewrites the whole identity set, so it costs ~4 ms plus ~0.4 ms per identity that
exists (a mint of three writes: ~15 ms with a few identities, ~140 ms with 200).

Keys are generated here, not by the server (CreateAccessKey takes caller-supplied keys): a row
can hold its keys before the identity exists (the upgrade's data migration), and a retry
provisions the same keys.
"""

from __future__ import annotations

import json
import secrets
import string
from functools import lru_cache
from typing import Any

from django.conf import settings

CONNECT_TIMEOUT = 3
READ_TIMEOUT = 10
_KEY_ALPHABET = string.ascii_uppercase + string.digits
_SECRET_ALPHABET = string.ascii_letters + string.digits


class StorageUnavailable(Exception):
    """Object storage (or its IAM API) did not answer, or refused the console itself."""


def configured() -> bool:
    return bool(settings.S3_ENDPOINT_URL)


def new_access_key(kind: str) -> str:
    """20 characters, AWS-like: SAI + U (a user's) or J (an attempt's) + 16 random."""
    return f"SAI{kind}" + "".join(secrets.choice(_KEY_ALPHABET) for _ in range(16))


def new_secret_key() -> str:
    return "".join(secrets.choice(_SECRET_ALPHABET) for _ in range(40))


@lru_cache(maxsize=8)
def _client(service: str, endpoint: str, access_key: str, secret_key: str) -> Any:
    # one client per process and credentials: a new one costs ~20 ms, and it keeps its connections
    import boto3
    from botocore.config import Config

    client = boto3.client(
        service, endpoint_url=endpoint, aws_access_key_id=access_key, aws_secret_access_key=secret_key,
        region_name="us-east-1",
        config=Config(connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT, retries={"max_attempts": 2}),
    )
    if service == "iam":
        client.meta.events.register("provide-client-params.iam.CreateAccessKey", _stash_supplied_key)
        client.meta.events.register("before-call.iam.CreateAccessKey", _send_supplied_key)
    return client


def _stash_supplied_key(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    # boto3's model of CreateAccessKey has no AccessKeyId/SecretAccessKey (AWS makes them);
    # SeaweedFS takes them: carried past botocore's parameter check in the call's own context
    for name in ("AccessKeyId", "SecretAccessKey"):
        if name in params:
            context[name] = params.pop(name)


def _send_supplied_key(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    for name in ("AccessKeyId", "SecretAccessKey"):
        if name in context:
            params["body"][name] = context[name]


def admin_s3() -> Any:
    """The console's own S3 client (buckets, the upgrade's copies)."""
    return _client("s3", settings.S3_ENDPOINT_URL, settings.S3_ACCESS_KEY, settings.S3_SECRET_KEY)


def _iam() -> Any:
    return _client("iam", settings.S3_ENDPOINT_URL, settings.S3_ACCESS_KEY, settings.S3_SECRET_KEY)


def s3_as(access_key: str, secret_key: str, endpoint: str = "") -> Any:
    """An S3 client with someone's own keys (a user's space, an attempt's)."""
    return _client("s3", endpoint or settings.S3_ENDPOINT_URL, access_key, secret_key)


def error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def _call(method: Any, **params: Any) -> Any:
    """One IAM or S3 call; a connection failure becomes StorageUnavailable, an answer stays a ClientError."""
    try:
        return method(**params)
    except Exception as exc:
        if error_code(exc):
            raise
        raise StorageUnavailable(f"object storage at {settings.S3_ENDPOINT_URL} did not answer: {exc}") from exc


# -- policies ------------------------------------------------------------------------------------
def _policy(statements: list[dict[str, Any]]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, separators=(",", ":"))


def space_policy(bucket: str) -> str:
    """A user's keys: everything on objects of their own bucket; no bucket creation, no IAM."""
    return _policy([
        {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
         "Resource": [f"arn:aws:s3:::{bucket}/*"]},
        {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [f"arn:aws:s3:::{bucket}"]},
    ])


def attempt_policy(bucket: str, job_id: int) -> str:
    """An attempt's keys: read and list the owner's bucket, write and delete only the job's prefix."""
    return _policy([
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [f"arn:aws:s3:::{bucket}/*"]},
        {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [f"arn:aws:s3:::{bucket}"]},
        {"Effect": "Allow", "Action": ["s3:PutObject", "s3:DeleteObject"],
         "Resource": [f"arn:aws:s3:::{bucket}/jobs/{job_id}/*"]},
    ])


# -- buckets and identities ----------------------------------------------------------------------
def ensure_bucket(bucket: str) -> None:
    s3 = admin_s3()
    try:
        _call(s3.head_bucket, Bucket=bucket)
        return
    except StorageUnavailable:
        raise
    except Exception:
        pass  # 404: make it
    try:
        _call(s3.create_bucket, Bucket=bucket)
    except StorageUnavailable:
        raise
    except Exception as exc:
        if error_code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise StorageUnavailable(f"bucket {bucket} could not be created: {exc}") from exc


def create_identity(name: str, policy: str, access_key: str, secret_key: str) -> None:
    """The identity `name` with exactly this policy and this one key: three round trips.

    One that exists already (a retry, or a mint whose transaction rolled back) is made right
    instead: its policy replaced, any other key deleted."""
    iam = _iam()
    try:
        _call(iam.create_user, UserName=name)
        fresh = True
    except StorageUnavailable:
        raise
    except Exception as exc:
        if error_code(exc) != "EntityAlreadyExists":
            raise StorageUnavailable(f"identity {name} could not be created: {exc}") from exc
        fresh = False
    _put(iam.put_user_policy, UserName=name, PolicyName="simpleai", PolicyDocument=policy)
    # the key last: it never works, not even for an instant, without its policy
    add_key(name, access_key, secret_key)
    if not fresh:
        drop_other_keys(name, access_key)


def add_key(name: str, access_key: str, secret_key: str) -> None:
    """Give the identity this key (as well as any it has); a key it has already is fine (a retry)."""
    iam = _iam()
    try:
        _call(iam.create_access_key, UserName=name, AccessKeyId=access_key, SecretAccessKey=secret_key)
    except StorageUnavailable:
        raise
    except Exception as exc:
        if error_code(exc) != "EntityAlreadyExists":
            raise StorageUnavailable(f"a key for {name} could not be created: {exc}") from exc


def drop_other_keys(name: str, keep: str) -> int:
    """Delete every key of the identity but `keep` (they stop working at once); returns how many."""
    iam = _iam()
    dropped = 0
    for key in _put(iam.list_access_keys, UserName=name).get("AccessKeyMetadata", []):
        if key["AccessKeyId"] != keep:
            _put(iam.delete_access_key, UserName=name, AccessKeyId=key["AccessKeyId"])
            dropped += 1
    return dropped


def delete_identity(name: str) -> bool:
    """Delete the identity and its keys (they stop working at once); False when there was none."""
    try:
        _call(_iam().delete_user, UserName=name)
    except StorageUnavailable:
        raise
    except Exception as exc:
        if error_code(exc) in ("NoSuchEntity", "NoSuchEntityException"):
            return False
        raise StorageUnavailable(f"identity {name} could not be deleted: {exc}") from exc
    return True


def identity_names(prefix: str) -> list[str]:
    """Every identity whose name starts with `prefix`."""
    iam, names, marker = _iam(), [], None
    while True:
        page = _put(iam.list_users, **({"Marker": marker} if marker else {}))
        names += [user["UserName"] for user in page.get("Users", []) if user["UserName"].startswith(prefix)]
        marker = page.get("Marker")
        if not page.get("IsTruncated") or not marker:
            return names


def _put(method: Any, **params: Any) -> Any:
    try:
        return _call(method, **params)
    except StorageUnavailable:
        raise
    except Exception as exc:
        raise StorageUnavailable(f"{getattr(method, '__name__', 'IAM call')} failed: {exc}") from exc
