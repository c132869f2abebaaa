"""Quotas staff set per user or per group in the admin (rules: workspaces.quotas)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models

from ..quotas import Limits


class Quota(models.Model):
    """Limits of one user or one group; an empty limit means no limit."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="quota")
    group = models.OneToOneField(Group, null=True, blank=True, on_delete=models.CASCADE, related_name="quota")
    max_gpus_in_use = models.PositiveIntegerField(
        null=True, blank=True, verbose_name="maximum GPUs in use at once",
        help_text="Jobs beyond it wait in Pending (jobs in a Training Workspace do not count)",
    )
    max_concurrent_jobs = models.PositiveIntegerField(
        null=True, blank=True, verbose_name="maximum concurrent jobs",
        help_text="Jobs that have not ended; creating one more is refused",
    )
    max_nodes_per_job = models.PositiveIntegerField(null=True, blank=True, verbose_name="maximum nodes per job")
    allowed_server_types = models.ManyToManyField(
        "jobs.ServerType", blank=True, related_name="+", help_text="None selected: every server type",
    )
    spot_allowed = models.BooleanField(default=True, verbose_name="Spot Training allowed")
    workspaces_allowed = models.BooleanField(default=True, verbose_name="Training Workspaces allowed")
    monthly_gpu_hour_budget = models.DecimalField(
        max_digits=12, decimal_places=2, null=True, blank=True, verbose_name="monthly GPU-hour budget",
        help_text="GPU-hours of jobs outside workspaces per calendar month; beyond it jobs are refused",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(user__isnull=False, group__isnull=True) | models.Q(user__isnull=True, group__isnull=False),
                name="quota_for_one_user_or_group",
            ),
        ]

    def __str__(self) -> str:
        return f"Quota of {'user ' + str(self.user) if self.user_id else 'group ' + str(self.group)}"

    def limits(self) -> Limits:
        """Needs allowed_server_types prefetched to stay at one query per quota."""
        types = frozenset(st.name for st in self.allowed_server_types.all())
        return Limits(
            max_gpus_in_use=self.max_gpus_in_use, max_concurrent_jobs=self.max_concurrent_jobs,
            max_nodes_per_job=self.max_nodes_per_job, allowed_server_types=types or None,
            spot_allowed=self.spot_allowed, workspaces_allowed=self.workspaces_allowed,
            monthly_gpu_hour_budget=self.monthly_gpu_hour_budget,
        )
