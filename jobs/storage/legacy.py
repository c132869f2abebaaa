"""The upgrade to tenant storage spaces, run once by an operator (and safely again at every
`make run` start): `manage.py storage_spaces --provision-all`.

Before, every job's outputs and checkpoints went to one shared bucket (S3_RESULTS_BUCKET,
`jobs/<id>/...`) and training scripts lived wherever their users had put them with the console's
keys. Now an owner's keys reach only their own bucket, so what existing jobs own is copied
there (with the console's admin client: server-side copies) and the jobs are pointed at it:

    s3://<results bucket>/jobs/<id>/...  →  s3://<owner's bucket>/jobs/<id>/...   (result, checkpoint, outputs)
    s3://<bucket>/<key> (a job's script) →  s3://<owner's bucket>/uploads/legacy/<bucket>/<key>

The originals stay where they were (the operator removes the old buckets once satisfied).
Idempotent: a job already pointing into its owner's bucket is skipped, an object already copied
is not copied again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from nodeagent.storage import parse_s3_url

from ..models import Placement, TrainingJob
from . import iam
from .models import StorageSpace, bucket_name
from .spaces import new_space, provision

log = logging.getLogger(__name__)


@dataclass
class Report:
    spaces_made: int = 0
    provisioned: int = 0
    failed: list[str] = field(default_factory=list)
    results_moved: int = 0  # jobs whose results/checkpoints now live in their owner's bucket
    objects_copied: int = 0
    scripts_moved: int = 0
    missing: list[str] = field(default_factory=list)  # sources that were not there to copy


def provision_all(report: Report | None = None) -> Report:
    """A space row for every user, and every row provisioned."""
    report = report or Report()
    users = set(get_user_model().objects.values_list("pk", flat=True))
    have = set(StorageSpace.objects.values_list("user_id", flat=True))
    rows = [new_space(user_id) for user_id in sorted(users - have)]
    StorageSpace.objects.bulk_create(rows, ignore_conflicts=True)
    report.spaces_made = len(rows)
    for space in StorageSpace.objects.filter(provisioned=False).order_by("pk"):
        try:
            provision(space)
            report.provisioned += 1
        except iam.StorageUnavailable as exc:
            report.failed.append(f"{space.bucket}: {exc}")
    return report


def move_legacy_data(report: Report | None = None) -> Report:
    """Copy what existing jobs own into their owners' buckets and point the jobs there."""
    report = report or Report()
    old = f"s3://{settings.S3_RESULTS_BUCKET}/jobs/"
    for job in TrainingJob.objects.filter(result_url__startswith=old) | TrainingJob.objects.filter(checkpoint_url__startswith=old):
        _move_results(job, report)
    for job in TrainingJob.objects.exclude(script_url="").only("pk", "owner_id", "script_url"):
        if parse_s3_url(job.script_url)[0] != bucket_name(job.owner_id):
            _move_script(job, report)
    return report


def _copy_prefix(source_bucket: str, prefix: str, target_bucket: str, report: Report) -> int:
    s3 = iam.admin_s3()
    present = {item["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=target_bucket, Prefix=prefix)
               for item in page.get("Contents", [])}
    copied = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=source_bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            if item["Key"] not in present:
                s3.copy({"Bucket": source_bucket, "Key": item["Key"]}, target_bucket, item["Key"])
                copied += 1
    report.objects_copied += copied
    return copied


def _move_results(job: TrainingJob, report: Report) -> None:
    source, target = settings.S3_RESULTS_BUCKET, bucket_name(job.owner_id)
    prefix = f"jobs/{job.pk}/"
    try:
        _copy_prefix(source, prefix, target, report)
    except Exception as exc:
        if iam.error_code(exc) != "NoSuchBucket":
            raise
        report.missing.append(f"s3://{source}/{prefix}")
    old, new = f"s3://{source}/{prefix}", f"s3://{target}/{prefix}"
    with transaction.atomic():
        locked = TrainingJob.objects.select_for_update().filter(pk=job.pk).first()
        if locked is None:
            return
        changed = [name for name in ("result_url", "checkpoint_url") if getattr(locked, name).startswith(old)]
        for name in changed:
            setattr(locked, name, new + getattr(locked, name)[len(old):])
        locked.save(update_fields=changed)
        for placement in Placement.objects.filter(attempt__job_id=job.pk, output_url__startswith=old):
            placement.output_url = new + placement.output_url[len(old):]
            placement.save(update_fields=["output_url"])
    report.results_moved += 1


def _move_script(job: TrainingJob, report: Report) -> None:
    bucket, key = parse_s3_url(job.script_url)
    target, target_key = bucket_name(job.owner_id), f"uploads/legacy/{bucket}/{key}"
    s3 = iam.admin_s3()
    try:
        s3.head_object(Bucket=target, Key=target_key)
    except Exception:
        try:
            s3.copy({"Bucket": bucket, "Key": key}, target, target_key)
            report.objects_copied += 1
        except Exception as exc:
            if iam.error_code(exc) in ("404", "NoSuchKey", "NoSuchBucket"):
                report.missing.append(job.script_url)  # gone before the upgrade: the job keeps its URL
                return
            raise
    TrainingJob.objects.filter(pk=job.pk, script_url=job.script_url).update(script_url=f"s3://{target}/{target_key}")
    report.scripts_moved += 1
