"""The status history row that jobs and workspaces both keep (healthchecks' Flip): one per
status change, written by their action functions alone (jobs.actions, workspaces.status)."""

from __future__ import annotations

from django.db import models


class StatusChange(models.Model):
    """Subclasses add the foreign key to what changed, named by SUBJECT."""

    SUBJECT = ""  # the foreign key's name: "job", "workspace"

    old_status = models.CharField(max_length=40, blank=True)
    new_status = models.CharField(max_length=40)
    reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{getattr(self, f'{self.SUBJECT}_id')}: {self.old_status or '∅'} → {self.new_status}"
