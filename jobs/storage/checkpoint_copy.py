"""Starting a new job from an earlier job's checkpoint (`from_checkpoint`).

The source's newest durable checkpoint (`step-N/` under its checkpoint prefix) is copied into
the new job's checkpoint prefix before the new job's first attempt, so that attempt starts as a
failover would: its nodes find step N under CHECKPOINT_S3_URL and get CKPT_LAST_STEP=N.

Manifests are signed with their job's own key (jobs.storage.credentials.checkpoint_signing_key;
the checkpoint library and the agent trust only what the job's key verifies), so the copy's
MANIFEST.json is checked with the source's key and signed again with the new job's. It is
written last, as the library writes it: a copy cut short is no checkpoint at all.

Copies are server-side (CopyObject; multipart copy for large shards): the bytes stay in object
storage. They are made with the owner's own keys, inside the owner's bucket only.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from boto3.s3.transfer import TransferConfig

from nodeagent.checkpoint_trust import signing

from . import iam
from .models import bucket_name
from .objectstore import checkpoint_prefix
from .spaces import ensure_space

log = logging.getLogger(__name__)
MANIFEST = "MANIFEST.json"
MAX_MANIFEST_BYTES = 64 << 20
COPIES_AT_ONCE = 4
# each copy's own multipart parts in flight: COPIES_AT_ONCE × this stays within botocore's pool of 10
PARTS_AT_ONCE = 2


class CopyFailed(Exception):
    """The checkpoint could not be copied; the message is for the user (the job's reason).
    `transient`: object storage did not answer; trying again may work."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class Copied:
    step: int
    url: str  # the new job's s3://…/checkpoints/step-N
    files: int  # besides the manifest
    bytes: int


def resign(data: bytes, step: int, source_key: bytes, target_key: bytes) -> bytes:
    """The manifest, verified with the source job's key (and for `step`), signed with the target's.
    Raises signing.UntrustedManifest when the source's manifest does not verify."""
    manifest = signing.check(data, source_key, step)
    return json.dumps(signing.sign(manifest, target_key), indent=1).encode()


def _key_prefix(owner_id: int, job_id: int, step: int) -> str:
    bucket = bucket_name(owner_id)
    return f"{checkpoint_prefix(owner_id, job_id)[len(f's3://{bucket}/'):]}step-{step}/"


def copy_checkpoint(owner_id: int, source_job: int, target_job: int, step: int,
                    source_key: str, target_key: str, client: Any | None = None) -> Copied:
    """Copy `source_job`'s checkpoint `step` into `target_job`'s prefix (keys in hex, as
    CHECKPOINT_SIGNING_KEY). Raises CopyFailed with a message the user can act on."""
    bucket = bucket_name(owner_id)
    source, target = _key_prefix(owner_id, source_job, step), _key_prefix(owner_id, target_job, step)
    try:
        if client is None:
            space = ensure_space(owner_id)
            client = iam.s3_as(space.access_key, space.secret_key)
        response = client.get_object(Bucket=bucket, Key=source + MANIFEST)
        if int(response.get("ContentLength") or 0) > MAX_MANIFEST_BYTES:
            raise CopyFailed(f"The checkpoint of job {source_job} (step {step}) has a manifest too large to read.")
        manifest = resign(response["Body"].read(), step, _key(source_key), _key(target_key))
        keys = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=source):
            keys += [(item["Key"], int(item.get("Size") or 0)) for item in page.get("Contents", [])]
        files = [(key, size) for key, size in keys if key != source + MANIFEST]

        def copy(key: str) -> None:
            # managed copy: CopyObject, multipart above its threshold (shards over 5 GB too)
            client.copy({"Bucket": bucket, "Key": key}, bucket, target + key[len(source):],
                        Config=TransferConfig(max_concurrency=PARTS_AT_ONCE))

        # one shard per rank: copied side by side (boto3 clients are thread-safe)
        with ThreadPoolExecutor(max_workers=COPIES_AT_ONCE) as pool:
            for _ in pool.map(copy, [key for key, _ in files]):
                pass
        client.put_object(Bucket=bucket, Key=target + MANIFEST, Body=manifest)
        total = sum(size for _, size in files)
    except signing.UntrustedManifest as exc:
        raise CopyFailed(f"The checkpoint of job {source_job} (step {step}) cannot be trusted: {exc}.") from exc
    except CopyFailed:
        raise
    except Exception as exc:  # botocore ClientError, EndpointConnectionError, iam.StorageUnavailable
        log.warning("copying checkpoint step %s of job %s into job %s failed: %s", step, source_job, target_job, exc)
        if iam.error_code(exc) in ("404", "NoSuchKey"):
            raise CopyFailed(f"The checkpoint of job {source_job} (step {step}) is no longer in your storage.") from exc
        raise CopyFailed(f"The checkpoint of job {source_job} (step {step}) could not be copied (object storage "
                         "did not answer); try again in a moment.", transient=True) from exc
    return Copied(step, f"s3://{bucket}/{target}".rstrip("/"), len(files), total)


def _key(hex_key: str) -> bytes:
    key = signing.parse_key(hex_key)
    if key is None:
        raise CopyFailed("No checkpoint signing key.")
    return key


def copy_for_job(job_id: int) -> Copied | None:
    """Make the copy a waiting job starts from (jobs.tasks.copy_start_checkpoint); None when there
    is nothing to do (the job is gone, no longer waits, or has its checkpoint). Holds no lock
    while copying: the job may be stopped or deleted meanwhile (the action then changes nothing).
    Raises CopyFailed."""
    from ..choices import JobStatus
    from ..models import TrainingJob
    from .credentials import checkpoint_signing_key

    job = (TrainingJob.objects.filter(pk=job_id, status=JobStatus.PENDING, checkpoint_step__isnull=True,
                                      from_checkpoint_step__isnull=False)
           .values("owner_id", "from_checkpoint_id", "from_checkpoint_step").first())
    if job is None:
        return None
    source = job["from_checkpoint_id"]
    if source is None:  # SET_NULL: the source job was deleted before the copy was made
        raise CopyFailed(f"The job whose checkpoint step {job['from_checkpoint_step']} this job starts from was "
                         "deleted before the checkpoint was copied.")
    return copy_checkpoint(job["owner_id"], source, job_id, job["from_checkpoint_step"],
                           checkpoint_signing_key(source), checkpoint_signing_key(job_id))
