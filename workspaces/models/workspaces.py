"""Training Workspaces: reserved capacity (whole nodes taken out of the shared pool)."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.urls import reverse

from console.lib.history import StatusChange

from ..choices import WorkspaceStatus
from ..pricing import WorkspaceEstimate, workspace_estimate


class Workspace(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="training_workspaces")
    name = models.CharField(max_length=63)
    server_type = models.ForeignKey("jobs.ServerType", on_delete=models.PROTECT, related_name="workspaces")
    # the resource allocation: what each reserved node offers the workspace's jobs (and is billed)
    gpus_per_node = models.PositiveSmallIntegerField()
    memory_gb = models.PositiveIntegerField()
    node_count = models.PositiveSmallIntegerField(help_text="Nodes the workspace should hold")
    contract_months = models.PositiveSmallIntegerField()
    # fixed by the contract at creation: later price changes do not alter a running contract
    discount_percent = models.DecimalField(max_digits=5, decimal_places=2)
    price_per_gpu_hour = models.DecimalField(max_digits=10, decimal_places=4, help_text="Contract rate")
    status = models.CharField(max_length=16, choices=WorkspaceStatus.choices, default=WorkspaceStatus.CREATING)
    status_reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["owner", "name"], name="unique_workspace_name_per_owner")]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("workspaces:detail", args=[self.pk])

    @property
    def allocation_name(self) -> str:
        allocation = next((a for a in self.server_type.allocations() if a.gpus == self.gpus_per_node), None)
        return allocation.name if allocation else f"{self.gpus_per_node} GPU"

    def estimate(self, node_count: int | None = None) -> WorkspaceEstimate:
        return workspace_estimate(
            Decimal(self.price_per_gpu_hour), self.gpus_per_node, node_count or self.node_count, self.contract_months,
        )


class WorkspaceNode(models.Model):
    """One node held by one workspace from `reserved_at` until `released_at` (kept for billing)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="reservations")
    node = models.ForeignKey("jobs.Node", on_delete=models.SET_NULL, null=True, related_name="reservations")
    node_name = models.CharField(max_length=63, help_text="Kept when the node row is deleted")
    reserved_at = models.DateTimeField()
    released_at = models.DateTimeField(null=True, blank=True)
    draining = models.BooleanField(default=False, help_text="Released once its jobs end; takes no new job")

    class Meta:
        ordering = ["workspace", "node_name", "reserved_at"]
        constraints = [
            # a node belongs to at most one workspace at a time; the scheduler relies on it
            models.UniqueConstraint(
                fields=["node"], condition=models.Q(released_at__isnull=True), name="one_workspace_per_node",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workspace} ← {self.node_name}"


class WorkspaceStatusChange(StatusChange):
    """One row per status change: the workspace's history."""

    SUBJECT = "workspace"
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="status_changes")
