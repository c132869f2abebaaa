"""The audit log: who did what to whose credentials and locations, and when.

Operators read it in the admin (read-only, filtered by action and actor). A row is written for
every credential issued, rotated or revoked (a user's storage keys, an attempt's keys) and for
every refusal of a location that is not the user's (jobs.storage.checks). `record` writes one
row inside the caller's transaction: an action that rolls back leaves no row claiming it
happened; `record_many` writes a batch in one statement (a scheduler run's attempts).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import models

from .choices import TextChoices


class AuditAction(TextChoices):
    LOCATION_REFUSED = "location.refused", "Location refused (not the user's)"
    USER_KEYS_ISSUED = "user_keys.issued", "Storage keys issued"
    USER_KEYS_ROTATED = "user_keys.rotated", "Storage keys rotated"
    ATTEMPT_KEYS_ISSUED = "attempt_keys.issued", "Attempt credentials issued"
    ATTEMPT_KEYS_REVOKED = "attempt_keys.revoked", "Attempt credentials revoked"
    IDENTITY_REMOVED = "identity.removed", "Left-over storage identity removed"


class AuditEvent(models.Model):
    # the actor's name is kept as well: the row outlives a deleted user
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    actor_name = models.CharField(max_length=150, blank=True, help_text="The actor's user name, or the console itself")
    action = models.CharField(max_length=32, choices=AuditAction.choices)
    target = models.CharField(max_length=300, help_text="What it was done to: a URL, a bucket, an identity")
    detail = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # the admin lists newest first, filtered by action
            models.Index(fields=["action", "-created_at"], name="audit_action_time_idx"),
            models.Index(fields=["-created_at"], name="audit_time_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_name or 'console'} {self.action} {self.target}"


@dataclass(frozen=True)
class Entry:
    """One row of a batch (record_many); no actor: the console itself acted."""

    action: str
    target: str
    detail: str = ""
    actor_id: int | None = None
    actor_name: str = ""


def _row(entry: Entry) -> AuditEvent:
    return AuditEvent(actor_id=entry.actor_id, actor_name=entry.actor_name[:150], action=entry.action,
                      target=entry.target[:300], detail=entry.detail)


def record(action: str, target: str, detail: str = "", actor: Any = None) -> AuditEvent:
    """Write one row now (in the caller's transaction, if any); `actor` is a user or None."""
    row = _row(Entry(action, target, detail, actor.pk if actor is not None else None,
                     actor.get_username() if actor is not None else ""))
    row.save()
    return row


def record_many(entries: Iterable[Entry]) -> int:
    """Write many rows in one statement; returns how many."""
    rows = [_row(entry) for entry in entries]
    if rows:
        AuditEvent.objects.bulk_create(rows)
    return len(rows)
