"""Locations a user names, checked as that user: a job's training script must be an object of
their own storage space that their own keys can read.

One function, called by the creation form and the API serializer alike (jobs.submission), so
both refuse with the same message on the field. A location in another bucket is refused before
anything is asked of object storage, and the refusal is written to the audit log: nothing of
another tenant's is touched (and an attempt's keys could not read it anyway).
"""

from __future__ import annotations

import contextlib
from typing import Any

from django.conf import settings

from console.lib import audit
from console.lib.audit import AuditAction
from nodeagent.storage import parse_s3_url

from . import iam
from .models import bucket_name
from .spaces import ensure_space

NOT_CONFIGURED_MESSAGE = (
    "No object storage is configured on this console (S3_ENDPOINT_URL), so the training script "
    "cannot be read: configure it, or leave the script URL empty."
)


def not_yours_message(url: str, owner_id: int) -> str:
    return (f"{url} is not in your storage space (s3://{bucket_name(owner_id)}/). Upload the script there "
            "(Account › Storage) or correct the URL.")


def unavailable_message(url: str) -> str:
    return (f"Object storage at {settings.S3_ENDPOINT_URL} did not answer, so {url} could not be checked; "
            "try again in a moment.")


def script_object_error(owner: Any, url: str, field: str = "script_url") -> str | None:
    """None when `url` (already a well-formed s3:// URL) names an object of `owner`'s own space
    that their keys can read (HEAD needs what a download needs: s3:GetObject)."""
    if not settings.S3_ENDPOINT_URL:
        return NOT_CONFIGURED_MESSAGE
    if owner is None:
        return "A training script is read with its owner's keys: sign in to name one."
    bucket, key = parse_s3_url(url)
    if bucket != bucket_name(owner.pk):
        audit.record(AuditAction.LOCATION_REFUSED, url, f"{field} of a new job: not in {bucket_name(owner.pk)}", actor=owner)
        return not_yours_message(url, owner.pk)
    try:
        space = ensure_space(owner.pk)
    except iam.StorageUnavailable:
        return unavailable_message(url)
    client = iam.s3_as(space.access_key, space.secret_key)
    try:
        client.head_object(Bucket=bucket, Key=key)
        return None
    except Exception as exc:  # botocore ClientError, EndpointConnectionError, timeouts
        code = iam.error_code(exc)
        if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            return f"Your storage keys cannot read {url} (access denied); rotate them on the account page and try again."
        if code in ("404", "NoSuchKey", "NoSuchBucket"):
            return (f"There is no object at {url}: upload the training script first (Account › Storage, or "
                    f"aws s3 cp train.py {url} with your own keys), or correct the URL.")
        return unavailable_message(url)


class Locator:
    """Asks the owner's own storage space, with the owner's own keys (one client for all of a
    job's workdir and inputs), where a URL points. Never about another bucket."""

    NOT_FOUND = "not found"

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self._client: Any = None

    def _s3(self) -> Any:
        if self._client is None:
            space = ensure_space(self.owner.pk)
            self._client = iam.s3_as(space.access_key, space.secret_key)
        return self._client

    def _is_prefix(self, bucket: str, prefix: str) -> bool:
        listed = self._s3().list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
        return bool(listed.get("KeyCount") or listed.get("Contents"))

    def locate(self, url: str) -> tuple[str, str | None]:
        """(the URL, None) for an object or for a prefix ending in "/" that holds objects; a key
        that is no object but a folder comes back with its "/" added (the node syncs it as a
        tree). (url, NOT_FOUND) when neither exists; (url, why) when storage cannot say."""
        if not settings.S3_ENDPOINT_URL:
            return url, f"No object storage is configured on this console (S3_ENDPOINT_URL), so {url} cannot be read."
        bucket, key = parse_s3_url(url)
        if bucket != bucket_name(self.owner.pk):  # the plain rules refused it already; storage is never asked
            return url, not_yours_message(url, self.owner.pk)
        try:
            if key.endswith("/"):
                return url, None if self._is_prefix(bucket, key) else self.NOT_FOUND
            try:
                self._s3().head_object(Bucket=bucket, Key=key)
                return url, None
            except Exception as exc:
                if iam.error_code(exc) not in ("404", "NoSuchKey"):
                    raise
            return (url + "/", None) if self._is_prefix(bucket, key + "/") else (url, self.NOT_FOUND)
        except iam.StorageUnavailable:
            return url, unavailable_message(url)
        except Exception as exc:  # botocore ClientError, EndpointConnectionError, timeouts
            if iam.error_code(exc) in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                return url, f"Your storage keys cannot read {url} (access denied); rotate them on the account page and try again."
            return url, unavailable_message(url)

    def workdir_error(self, url: str) -> str | None:
        """The packed project must be there before the job is: the CLI uploads it first."""
        found, error = self.locate(url)
        if error == self.NOT_FOUND:
            return (f"Workdir {url} was not found in your storage: upload it first (simpleai run --workdir does) "
                    "or correct the URL.")
        if error is None and found != url:
            return f"{url} is a folder; a workdir is one .tar.gz object."
        return error

    def input_error(self, name: str, url: str) -> tuple[str, str | None]:
        """(the input's URL as the node should sync it, the field's message or None)."""
        found, error = self.locate(url)
        if error == self.NOT_FOUND:
            error = (f"There is nothing under {url} in your storage." if url.endswith("/")
                     else f"{url} was not found in your storage.")
        return found, f"Input {name}: {error}" if error else None


def audit_elsewhere(owner: Any, field: str, urls: list[str]) -> None:
    """A workdir or input URL in another bucket is refused from its text (jobs.validation); the
    attempt is written to the audit log, as a script URL's is."""
    own = bucket_name(owner.pk)
    for url in urls:
        if url.startswith("s3://") and url[len("s3://"):].partition("/")[0] != own:
            audit.record(AuditAction.LOCATION_REFUSED, url[:500], f"{field} of a new job: not in {own}", actor=owner)


def provision_quietly(owner: Any) -> None:
    """Make the owner's space on their first job (its attempts need the bucket); a storage that
    does not answer now is tried again when the attempt is created."""
    if settings.S3_ENDPOINT_URL and owner is not None:
        with contextlib.suppress(iam.StorageUnavailable):
            ensure_space(owner.pk)
