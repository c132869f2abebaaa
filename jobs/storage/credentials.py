"""An attempt's own object-storage credentials, and what a placement carries of them.

Minted when the attempt is created (jobs.lifecycle.start_attempts, jobs.slurm.runs.begin_run),
inside the transaction that creates it: the identity `job-<job id>-a<number>` with one key that
reads and lists the owner's bucket and writes only `jobs/<job id>/` (iam.attempt_policy). If that
transaction rolls back, the identity is left over; `sweep` removes it (a job row it cannot lock
is one whose attempt is being created right now: it waits for the next sweep).

Revoked when the attempt no longer holds a placement (every placement exited, was lost or
released): `sweep` is level-triggered, run by beat every STORAGE_SWEEP_SECONDS and asked for
after the commit of whatever ends placements (`request_sweep_on_commit`). The agent uploads
OUTPUT_DIR and sends the last checkpoint commit before its exit report, so nothing of the
attempt's own needs the key after its placements end; a node cut off and declared Lost keeps
running until it fences itself, and from then on can write nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import lru_cache
from typing import Any

from celery import current_app
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import DateTimeField, Exists, ExpressionWrapper, F, OuterRef, Q, Value
from django.utils import timezone

from console.lib import audit, crypto
from console.lib.audit import AuditAction
from nodeagent import protocol

from ..models.attempts import HOLDING_STATES, JobAttempt, Placement
from . import iam
from .models import ReadyAttemptKey, StorageSpace, bucket_name
from .objectstore import checkpoint_prefix
from .spaces import ensure_space

log = logging.getLogger(__name__)

SWEEP_REQUESTED = "simpleai:storage:sweep-requested"
REQUEST_EXPIRY_SECONDS = 60
_IDENTITY = re.compile(r"job-(\d+)-a(\d+)")


def identity_name(job_id: int, attempt: int) -> str:
    return f"job-{job_id}-a{attempt}"


# -- the per-job checkpoint signing key ----------------------------------------------------------
@lru_cache(maxsize=4)
def _checkpoint_root(secret_key: str) -> bytes:
    # a key of its own, derived from SECRET_KEY for this one purpose
    return hmac.new(secret_key.encode(), b"simpleai checkpoint signing", hashlib.sha256).digest()


def checkpoint_signing_key(job_id: int) -> str:
    """CHECKPOINT_SIGNING_KEY of every attempt of the job (hex): its checkpoints' manifests are
    signed with it, and only a manifest it verifies is resumed from. Another job's key cannot
    be derived from it."""
    return hmac.new(_checkpoint_root(settings.SECRET_KEY), f"checkpoint:{job_id}".encode(), hashlib.sha256).hexdigest()


# -- minting -------------------------------------------------------------------------------------
WAITING_FOR_STORAGE = ("Waiting: object storage did not answer, so the attempt's storage credentials could not "
                       "be issued; the scheduler tries again")


@dataclass(frozen=True)
class Minted:
    access_key: str
    secret_encrypted: str


@dataclass
class Mint:
    """What `mint` made: job id → its next attempt's keys; job id → why none (the job waits)."""

    keys: dict[int, Minted] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)


def mint(jobs: Iterable[Any]) -> Mint:
    """Credentials for the next attempt (current_attempt + 1) of each job (rows with pk,
    owner_id, current_attempt; the caller holds their locks), with an audit row each.

    Keys minted ahead (`mint_ahead`) are taken as they are: no round trip. The rest cost three
    IAM round trips each (iam.create_identity); once object storage fails to answer they are
    not tried any more: each would wait for the same timeout."""
    jobs = list(jobs)
    result = Mint()
    if not iam.configured() or not jobs:
        return result
    ahead = {row.job_id: row for row in ReadyAttemptKey.objects.filter(job_id__in=[job.pk for job in jobs])}
    if ahead:
        ReadyAttemptKey.objects.filter(job_id__in=list(ahead)).delete()  # taken now, or of an older attempt
    for job in jobs:
        row = ahead.get(job.pk)
        if row is not None and row.number == job.current_attempt + 1:
            result.keys[job.pk] = Minted(row.access_key, row.secret_encrypted)
    jobs = [job for job in jobs if job.pk not in result.keys]
    if not jobs:
        return result
    started = time.perf_counter()
    owners = {job.owner_id for job in jobs}
    ready = set(StorageSpace.objects.filter(user_id__in=owners, provisioned=True).values_list("user_id", flat=True))
    down = ""
    for owner_id in sorted(owners - ready):  # made on first need: a job created without the form or the API
        try:
            ensure_space(owner_id)
            ready.add(owner_id)
        except iam.StorageUnavailable as exc:
            log.warning("the storage space of user %s could not be provisioned: %s", owner_id, exc)
            down = str(exc)
            break
    entries = []
    for job in jobs:
        if down or job.owner_id not in ready:
            result.failed[job.pk] = WAITING_FOR_STORAGE
            continue
        number = job.current_attempt + 1
        name, access_key, secret_key = identity_name(job.pk, number), iam.new_access_key("J"), iam.new_secret_key()
        try:
            iam.create_identity(name, iam.attempt_policy(bucket_name(job.owner_id), job.pk), access_key, secret_key)
        except iam.StorageUnavailable as exc:
            log.warning("credentials of attempt %s could not be issued: %s", name, exc)
            down = str(exc)
            result.failed[job.pk] = WAITING_FOR_STORAGE
            continue
        result.keys[job.pk] = Minted(access_key, crypto.encrypt(secret_key))
        entries.append(audit.Entry(AuditAction.ATTEMPT_KEYS_ISSUED, name,
                                   f"job {job.pk} attempt {number}: access key {access_key}, reads "
                                   f"s3://{bucket_name(job.owner_id)}/, writes s3://{bucket_name(job.owner_id)}/jobs/{job.pk}/",
                                   actor_id=job.owner_id))
    if entries:
        _name_and_record(entries)
        log.info("issued storage credentials for %d attempt(s) in %.0f ms", len(entries), (time.perf_counter() - started) * 1000)
    return result


def mint_ahead(job_id: int) -> bool:
    """Mint the keys of a waiting job's next attempt now, off the scheduler's path (a Celery task
    queued when the job is created): the run that places it then takes them without a round
    trip, however many jobs it places. True when keys are ready.

    The job's row is locked meanwhile, as a scheduler run locks it to mint: whoever comes second
    finds the keys made (a run) or the attempt created (this, which then does nothing), and the
    sweep leaves the identity of a locked job alone."""
    from ..lifecycle import KIND_BY_STATUS
    from ..models import TrainingJob

    if not iam.configured():
        return False
    with transaction.atomic():
        job = (TrainingJob.objects.select_for_update().filter(pk=job_id, status__in=list(KIND_BY_STATUS))
               .only("pk", "owner_id", "current_attempt").first())
        if job is None:
            return False  # placed (or gone) meanwhile: its attempt has keys of its own
        number = job.current_attempt + 1
        if ReadyAttemptKey.objects.filter(job_id=job_id, number=number).exists():
            return True
        ensure_space(job.owner_id)
        name, access_key, secret_key = identity_name(job_id, number), iam.new_access_key("J"), iam.new_secret_key()
        # an identity of that name left by a run whose transaction rolled back is taken over
        iam.create_identity(name, iam.attempt_policy(bucket_name(job.owner_id), job_id), access_key, secret_key)
        ReadyAttemptKey.objects.update_or_create(job_id=job_id, defaults={
            "number": number, "access_key": access_key, "secret_encrypted": crypto.encrypt(secret_key)})
        _name_and_record([audit.Entry(
            AuditAction.ATTEMPT_KEYS_ISSUED, name,
            f"job {job_id} attempt {number} (ahead): access key {access_key}, reads s3://{bucket_name(job.owner_id)}/, "
            f"writes s3://{bucket_name(job.owner_id)}/jobs/{job_id}/", job.owner_id)])
    return True


def mint_ahead_on_commit(job_id: int) -> None:
    """After the job's creation commits, queue `mint_ahead` (before the scheduler is asked)."""
    if settings.S3_ENDPOINT_URL:
        transaction.on_commit(lambda: _send("jobs.tasks.mint_attempt_keys_ahead", job_id))


def _send(task: str, *args: Any) -> None:
    try:
        current_app.send_task(task, args=list(args))
    except Exception:
        log.warning("could not queue %s; the scheduler mints what it needs itself", task, exc_info=True)




def attempt_fields(minted: Mint, job_id: int) -> dict[str, str]:
    """The JobAttempt fields of the job's new attempt (none when nothing was minted)."""
    keys = minted.keys.get(job_id)
    return {"storage_access_key": keys.access_key, "storage_secret_encrypted": keys.secret_encrypted} if keys else {}


def _name_and_record(entries: list[audit.Entry]) -> None:
    """Audit rows of attempts' keys, each with its owner's name (one query for all)."""
    names = dict(get_user_model().objects.filter(pk__in={e.actor_id for e in entries}).values_list("pk", "username"))
    audit.record_many([audit.Entry(e.action, e.target, e.detail, e.actor_id, names.get(e.actor_id, "")) for e in entries])


# -- what a placement carries --------------------------------------------------------------------
def placement_storage(job_id: int, owner_id: int, access_key: str, secret_encrypted: str,
                      ) -> tuple[protocol.PlacementStorage | None, dict[str, str]]:
    """The placement's `storage` and its environment: the attempt's keys, where its checkpoints
    go, and the job's checkpoint signing key. Never the console's keys. No object storage or no
    key minted: no `storage`, and only the signing key."""
    env = {"CHECKPOINT_SIGNING_KEY": checkpoint_signing_key(job_id)}
    if not settings.S3_ENDPOINT_URL or not access_key:
        return None, env
    endpoint, bucket, secret = settings.S3_ENDPOINT_URL, bucket_name(owner_id), crypto.decrypt(secret_encrypted)
    env.update({
        "S3_ENDPOINT_URL": endpoint, "S3_ACCESS_KEY": access_key, "S3_SECRET_KEY": secret,
        # boto3 and the AWS CLI find these without being told
        "AWS_ENDPOINT_URL_S3": endpoint, "AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret,
        "SIMPLEAI_BUCKET": bucket,
        "CHECKPOINT_S3_URL": checkpoint_prefix(owner_id, job_id).rstrip("/"),
    })
    return protocol.PlacementStorage(endpoint_url=endpoint, bucket=bucket, access_key=access_key, secret_key=secret), env


# -- revocation ----------------------------------------------------------------------------------
def request_sweep_on_commit() -> None:
    """After the current transaction commits (placements ended), ask for a sweep."""
    if settings.S3_ENDPOINT_URL:
        transaction.on_commit(request_sweep)


def request_sweep() -> None:
    """Queue one sweep (a burst of endings queues one); never raises: beat's sweep makes up for it."""
    from ..channel.notify import _flags

    try:
        if _flags().set(SWEEP_REQUESTED, "1", nx=True, ex=REQUEST_EXPIRY_SECONDS):
            current_app.send_task("jobs.tasks.sweep_storage_credentials")
    except Exception:
        log.warning("could not ask for a credential sweep; beat's next one does it", exc_info=True)


def sweep_request_taken() -> None:
    from ..channel.notify import _flags

    try:
        _flags().delete(SWEEP_REQUESTED)
    except Exception:
        log.warning("could not clear the credential sweep request", exc_info=True)


@dataclass(frozen=True)
class Swept:
    revoked: list[str]
    removed: list[str]


def sweep() -> Swept:
    """Revoke the credentials of attempts that hold no placement any more, and delete identities
    `job-*` the database does not know (or knows revoked) and `user-*` of users that are gone.
    Idempotent; each revocation is its own small transaction."""
    if not iam.configured():
        return Swept([], [])
    return Swept(revoke_ended(), remove_leftovers())


def revoke_ended() -> list[str]:
    holding = Placement.objects.filter(attempt_id=OuterRef("pk"), state__in=HOLDING_STATES)
    # a Slurm run ends (Slurm says so) while its steps still have their stop grace after SIGTERM
    # to save a last checkpoint: its keys live that long too (an agent's placement ends only
    # with its exit report, sent after its uploads)
    slurm_grace_until = ExpressionWrapper(
        F("slurm_run__ended_at") + F("slurm_run__slurm_job__cluster__stop_grace_seconds") * Value(timedelta(seconds=1)),
        output_field=DateTimeField(),
    )
    now = timezone.now()
    ended = (JobAttempt.objects.filter(storage_revoked_at__isnull=True).exclude(storage_access_key="")
             .filter(~Exists(holding)).alias(grace_until=slurm_grace_until)
             .filter(Q(grace_until__isnull=True) | Q(grace_until__lte=now))
             .values_list("pk", "job_id", "number", "storage_access_key", "job__owner_id", "job__owner__username"))
    revoked = []
    for pk, job_id, number, access_key, owner_id, owner_name in ended:
        name = identity_name(job_id, number)
        iam.delete_identity(name)  # first: the row never says revoked while the key works
        with transaction.atomic():
            if JobAttempt.objects.filter(pk=pk, storage_revoked_at__isnull=True).update(storage_revoked_at=timezone.now()):
                audit.record_many([audit.Entry(AuditAction.ATTEMPT_KEYS_REVOKED, name,
                                               f"job {job_id} attempt {number} ended: access key {access_key} deleted",
                                               owner_id, owner_name or "")])
                revoked.append(name)
    return revoked


def _drop_unused_ahead() -> None:
    """Keys minted ahead for a job that no longer waits (it was stopped before it was placed):
    their rows go, and the identities with them (below: the database no longer knows them)."""
    from ..lifecycle import KIND_BY_STATUS

    ReadyAttemptKey.objects.exclude(job__status__in=list(KIND_BY_STATUS)).delete()


def remove_leftovers() -> list[str]:
    from ..models import TrainingJob

    names = iam.identity_names("job-") + iam.identity_names("user-")
    wanted: dict[tuple[int, int], str] = {}
    for name in names:
        if match := _IDENTITY.fullmatch(name):
            wanted[(int(match[1]), int(match[2]))] = name
    _drop_unused_ahead()
    job_ids = {job_id for job_id, _ in wanted}
    live = set(
        JobAttempt.objects.filter(job_id__in=job_ids, storage_revoked_at__isnull=True)
        .exclude(storage_access_key="").values_list("job_id", "number")
    ) | set(ReadyAttemptKey.objects.filter(job_id__in=job_ids).values_list("job_id", "number")) if wanted else set()
    removed = []
    for key, name in sorted(wanted.items()):
        if key in live:
            continue
        with transaction.atomic():
            # a job whose row is locked may be creating this very attempt: its transaction has
            # not committed the key yet (the next sweep looks again)
            exists = TrainingJob.objects.filter(pk=key[0]).exists()
            if exists and not list(TrainingJob.objects.select_for_update(skip_locked=True).filter(pk=key[0]).values_list("pk")):
                continue
            if JobAttempt.objects.filter(job_id=key[0], number=key[1], storage_revoked_at__isnull=True).exclude(
                    storage_access_key="").exists() or ReadyAttemptKey.objects.filter(job_id=key[0], number=key[1]).exists():
                continue  # committed since the list above was read
            if iam.delete_identity(name):
                audit.record(AuditAction.IDENTITY_REMOVED, name, "no attempt with live credentials has this identity")
                removed.append(name)
    users = {int(name[len("user-"):]): name for name in names if name.startswith("user-") and name[5:].isdigit()}
    known = set(get_user_model().objects.filter(pk__in=list(users)).values_list("pk", flat=True)) if users else set()
    for user_id, name in sorted(users.items()):
        if user_id not in known and iam.delete_identity(name):
            audit.record(AuditAction.IDENTITY_REMOVED, name, f"user {user_id} no longer exists")
            removed.append(name)
    return removed

