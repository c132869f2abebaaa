"""Contract terms, each job's price (fixed when it is created) and the ledger of what ended.

Usage is computed from placements and reservations while their rows exist; when a job or a
workspace is deleted its spans are copied into UsageArchive first, so a month's bill does
not change because the user cleaned up.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models

from ..choices import Plan, UsageKind
from ..pricing import Span


class ContractTerm(models.Model):
    """A contract period offered for workspaces and its discount on the on-demand price."""

    months = models.PositiveSmallIntegerField(unique=True)
    discount_percent = models.DecimalField(max_digits=5, decimal_places=2, help_text="Off the on-demand price per GPU-hour")

    class Meta:
        ordering = ["months"]

    def __str__(self) -> str:
        return f"{self.months} month{'s' if self.months != 1 else ''} (−{self.discount_percent.normalize():f}%)"


class JobBilling(models.Model):
    """The plan and price a job was created under (a later price change does not alter it)."""

    job = models.OneToOneField("jobs.TrainingJob", on_delete=models.CASCADE, related_name="billing")
    plan = models.CharField(max_length=16, choices=Plan.choices)
    price_per_gpu_hour = models.DecimalField(max_digits=10, decimal_places=4)
    workspace_name = models.CharField(max_length=63, blank=True, help_text="Kept when the workspace is cancelled")

    def __str__(self) -> str:
        return f"{self.job_id}: {self.plan} at {self.price_per_gpu_hour}/GPU-h"


class UsageArchive(models.Model):
    """A span of GPUs held by a job or workspace that no longer exists."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="archived_usage")
    kind = models.CharField(max_length=16, choices=UsageKind.choices)
    source_id = models.BigIntegerField(help_text="Id of the deleted job or workspace")
    name = models.CharField(max_length=63)
    plan = models.CharField(max_length=16, choices=Plan.choices)
    server_type = models.CharField(max_length=16)
    gpus = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    lost_seconds = models.FloatField(default=0, help_text="Redone after an interruption: not charged")
    price_per_gpu_hour = models.DecimalField(max_digits=10, decimal_places=4)
    archived_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [
            # the usage page and the budget read one user's spans by time
            models.Index(fields=["owner", "started_at"], name="usage_owner_time_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}: {self.gpus} GPU {self.started_at:%Y-%m-%d %H:%M}→{self.ended_at:%H:%M}"

    def span(self) -> Span:
        return Span(self.started_at, self.ended_at, self.gpus, Decimal(self.price_per_gpu_hour), self.lost_seconds)
