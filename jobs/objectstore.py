"""The console's own use of object storage: the results bucket must exist before agents write,
and where in it a job's outputs and checkpoints go."""

from __future__ import annotations

import logging
from functools import lru_cache

from django.conf import settings

log = logging.getLogger(__name__)


def client():
    import boto3

    return boto3.client(
        "s3", endpoint_url=settings.S3_ENDPOINT_URL, aws_access_key_id=settings.S3_ACCESS_KEY,
        aws_secret_access_key=settings.S3_SECRET_KEY, region_name="us-east-1",
    )


@lru_cache(maxsize=4)
def _ensure(endpoint: str, bucket: str) -> bool:
    s3 = client()
    try:
        s3.head_bucket(Bucket=bucket)
    except Exception:
        try:
            s3.create_bucket(Bucket=bucket)
            log.info("created the results bucket %s at %s", bucket, endpoint)
        except Exception:
            log.warning("the results bucket %s cannot be created at %s", bucket, endpoint, exc_info=True)
            _ensure.cache_clear()
            return False
    return True


def ensure_results_bucket() -> bool:
    """Once per process: outputs and checkpoint mirrors go to S3_RESULTS_BUCKET."""
    if not settings.S3_ENDPOINT_URL:
        return False
    return _ensure(settings.S3_ENDPOINT_URL, settings.S3_RESULTS_BUCKET)


def job_prefix(job_id: int) -> str:
    return f"s3://{settings.S3_RESULTS_BUCKET}/jobs/{job_id}"


def output_prefix(job_id: int, attempt: int) -> str:
    """Where an attempt's nodes upload their OUTPUT_DIR."""
    return f"{job_prefix(job_id)}/attempt-{attempt}"


def checkpoint_prefix(job_id: int) -> str:
    """Where a job's checkpoints live (the CHECKPOINT_S3_URL its placements get, and all that a
    node's checkpoint commit may point at)."""
    return f"{job_prefix(job_id)}/checkpoints/"
