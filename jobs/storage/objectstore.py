"""Where a job's data lives in its owner's storage space (plan decision 3):

    s3://<owner's bucket>/jobs/<job id>/attempt-<n>/<role>/...   each node's OUTPUT_DIR
    s3://<owner's bucket>/jobs/<job id>/checkpoints/step-<N>/... the job's checkpoints
    s3://<owner's bucket>/uploads/<name>                         what the account page uploads

The owner's bucket is derived from their user id (jobs.storage.models.bucket_name). An
attempt's credentials may write only under `jobs/<job id>/` (jobs.storage.iam.attempt_policy).
"""

from __future__ import annotations

from typing import Any

from .models import bucket_name


def job_prefix(owner_id: int, job_id: int) -> str:
    return f"s3://{bucket_name(owner_id)}/jobs/{job_id}"


def output_prefix(owner_id: int, job_id: int, attempt: int) -> str:
    """Where an attempt's nodes upload their OUTPUT_DIR."""
    return f"{job_prefix(owner_id, job_id)}/attempt-{attempt}"


def checkpoint_prefix(owner_id: int, job_id: int) -> str:
    """Where a job's checkpoints live (the CHECKPOINT_S3_URL its placements get, and all that a
    node's checkpoint commit may point at)."""
    return f"{job_prefix(owner_id, job_id)}/checkpoints/"


def result_url(job: Any) -> str:
    """Where the job's results are, with a trailing "/" (the CLI's `download` lists it): what the
    completed attempt reported, else the current attempt's prefix; "" before the job is placed."""
    if job.result_url:
        return job.result_url if job.result_url.endswith("/") else job.result_url + "/"
    if job.current_attempt:
        return output_prefix(job.owner_id, job.pk, job.current_attempt) + "/"
    return ""
