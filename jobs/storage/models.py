"""A user's storage space: their bucket and the keys that reach only it (jobs.storage.spaces)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from console.lib import crypto


def bucket_name(user_id: int) -> str:
    """`<S3_TENANT_BUCKET_PREFIX>-u<id>`: derived, so a placement needs no lookup to name it."""
    return f"{settings.S3_TENANT_BUCKET_PREFIX}-u{user_id}"


def identity_name(user_id: int) -> str:
    return f"user-{user_id}"


class StorageSpace(models.Model):
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True,
                                related_name="storage_space")
    bucket = models.CharField(max_length=63, unique=True)
    access_key = models.CharField(max_length=32, unique=True)
    # Fernet token (console.lib.crypto); shown to its user on the account page, never logged
    secret_key_encrypted = models.TextField()
    # the bucket, the identity and this key exist in object storage (false: made on first need)
    provisioned = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    rotated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "jobs"

    def __str__(self) -> str:
        return self.bucket

    @property
    def secret_key(self) -> str:
        return crypto.decrypt(self.secret_key_encrypted)

    @property
    def identity(self) -> str:
        return identity_name(self.user_id)


class ReadyAttemptKey(models.Model):
    """Keys minted ahead for a waiting job's next attempt (jobs.storage.credentials.mint_ahead),
    so that the scheduler run which creates the attempt asks nothing of object storage: the
    attempt takes them (and this row goes). The identity is `job-<job>-a<number>`."""

    job = models.OneToOneField("jobs.TrainingJob", on_delete=models.CASCADE, primary_key=True, related_name="+")
    number = models.PositiveIntegerField()
    access_key = models.CharField(max_length=32)
    secret_encrypted = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "jobs"

    def __str__(self) -> str:
        return f"job-{self.job_id}-a{self.number}"
