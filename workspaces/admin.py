"""The back-office of workspaces, quotas and prices (server-type prices: jobs.admin)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from .models import (
    ContractTerm,
    JobBilling,
    Quota,
    UsageArchive,
    WarmStart,
    Workspace,
    WorkspaceNode,
    WorkspaceStatusChange,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows written by actions and the ledger: staff look, never edit."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class WorkspaceNodeInline(admin.TabularInline):
    model = WorkspaceNode
    extra = 0
    can_delete = False
    readonly_fields = ["node", "node_name", "reserved_at", "released_at", "draining"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class WorkspaceStatusChangeInline(admin.TabularInline):
    model = WorkspaceStatusChange
    extra = 0
    can_delete = False
    readonly_fields = ["old_status", "new_status", "reason", "created_at"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    """Status and reservations change through workspaces.actions (the user's pages and API)."""

    list_display = ["name", "owner", "status", "server_type", "gpus_per_node", "node_count", "contract_months", "price_per_gpu_hour", "created_at"]
    list_filter = ["status", "server_type", "contract_months"]
    search_fields = ["name", "owner__username"]
    list_select_related = ["owner", "server_type"]
    readonly_fields = [
        "owner", "server_type", "gpus_per_node", "memory_gb", "node_count", "contract_months", "discount_percent",
        "price_per_gpu_hour", "status", "status_reason", "created_at", "updated_at",
    ]
    inlines = [WorkspaceNodeInline, WorkspaceStatusChangeInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(WorkspaceNode)
class WorkspaceNodeAdmin(ReadOnlyAdmin):
    list_display = ["node_name", "workspace", "reserved_at", "released_at", "draining"]
    list_filter = ["draining", "released_at"]
    search_fields = ["node_name", "workspace__name", "workspace__owner__username"]
    list_select_related = ["workspace"]


@admin.register(WorkspaceStatusChange)
class WorkspaceStatusChangeAdmin(ReadOnlyAdmin):
    list_display = ["workspace", "old_status", "new_status", "reason", "created_at"]
    list_filter = ["new_status"]
    search_fields = ["workspace__name", "reason"]
    list_select_related = ["workspace"]


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = [
        "__str__", "max_gpus_in_use", "max_concurrent_jobs", "max_nodes_per_job", "server_types",
        "spot_allowed", "workspaces_allowed", "monthly_gpu_hour_budget",
    ]
    list_filter = ["spot_allowed", "workspaces_allowed"]
    search_fields = ["user__username", "group__name"]
    list_select_related = ["user", "group"]
    autocomplete_fields = ["user", "group"]
    filter_horizontal = ["allowed_server_types"]
    fieldsets = [
        ("Applies to (one of)", {"fields": ["user", "group"], "description": "A user's own quota replaces their groups' quotas; of several groups the most generous value applies."}),
        ("Limits (empty: no limit)", {"fields": [
            "max_gpus_in_use", "max_concurrent_jobs", "max_nodes_per_job", "allowed_server_types",
            "spot_allowed", "workspaces_allowed", "monthly_gpu_hour_budget",
        ]}),
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Quota]:
        return super().get_queryset(request).prefetch_related("allowed_server_types")

    @admin.display(description="allowed server types")
    def server_types(self, quota: Quota) -> str:
        return ", ".join(st.name for st in quota.allowed_server_types.all()) or "all"


@admin.register(ContractTerm)
class ContractTermAdmin(admin.ModelAdmin):
    """Contract periods offered for workspaces and their discounts (applies to new contracts)."""

    list_display = ["months", "discount_percent"]
    search_fields = ["months"]


@admin.register(JobBilling)
class JobBillingAdmin(ReadOnlyAdmin):
    list_display = ["job", "plan", "price_per_gpu_hour", "workspace_name"]
    list_filter = ["plan"]
    search_fields = ["job__name", "job__owner__username", "workspace_name"]
    list_select_related = ["job"]


@admin.register(UsageArchive)
class UsageArchiveAdmin(ReadOnlyAdmin):
    list_display = ["name", "owner", "kind", "plan", "server_type", "gpus", "started_at", "ended_at", "lost_seconds", "price_per_gpu_hour"]
    list_filter = ["kind", "plan", "server_type"]
    search_fields = ["name", "owner__username"]
    list_select_related = ["owner"]
    date_hierarchy = "started_at"


@admin.register(WarmStart)
class WarmStartAdmin(ReadOnlyAdmin):
    list_display = ["placement", "source_job_name", "source_job_id"]
    search_fields = ["source_job_name", "placement__node_name", "placement__attempt__job__name"]
    list_select_related = ["placement__attempt"]
