"""Admin for the node registry, tokens and attempts (registered from JobsConfig.ready)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils import timezone

from .. import actions as job_actions
from ..models import (
    ConsoleListening,
    HardwareEvent,
    JobAttempt,
    Node,
    NodeGPU,
    NodeToken,
    Placement,
    RejectedAgentMessage,
)
from ..recovery import goodput
from . import hardware

FAULT_DAYS = 30  # the period staff see each node's fault counts over


def _faults(by: str) -> Coalesce:
    """Attempts that ended by a fault on the node (by the platform or the user) in FAULT_DAYS."""
    counted = JobAttempt.objects.filter(
        fault_node=OuterRef("name"), fault_by=by, ended_at__gte=timezone.now() - timedelta(days=FAULT_DAYS),
    ).order_by().values("fault_node").annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


class NodeGPUInline(admin.TabularInline):
    model = NodeGPU
    extra = 0
    readonly_fields = ["index", "uuid", "model", "memory_gb"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "node_status", "server_type", "gpu_count", "address", "runtime", "connected", "cordoned", "cordon_reason",
                    "last_heartbeat_at", "platform_faults", "user_faults"]
    list_filter = ["server_type", "connected", "cordoned", "lost", "runtime"]
    search_fields = ["name", "address", "cordon_reason"]
    # cordon with the actions below (jobs.actions.set_cordon), not by editing the flag
    readonly_fields = ["connected", "lost", "cordoned", "cordon_reason", "last_heartbeat_at", "agent_version", "created_at",
                       "platform_faults", "user_faults"]
    inlines = [NodeGPUInline]
    actions = ["cordon", "uncordon", "reclaim"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Node]:
        return super().get_queryset(request).select_related("server_type").prefetch_related("gpus").annotate(
            platform_fault_count=_faults(goodput.PLATFORM), user_fault_count=_faults(goodput.USER),
        )

    @admin.display(description=f"Platform faults ({FAULT_DAYS} d)", ordering="platform_fault_count")
    def platform_faults(self, node: Node) -> int:
        """Attempts this node ended by a hardware fault, by going away, or by capacity reclaimed."""
        return node.platform_fault_count

    @admin.display(description=f"User faults ({FAULT_DAYS} d)", ordering="user_fault_count")
    def user_faults(self, node: Node) -> int:
        """Attempts that ended on this node by their own code or image failing."""
        return node.user_fault_count

    @admin.display(description="Status")
    def node_status(self, node: Node) -> str:
        return node.status()

    @admin.display(description="GPUs")
    def gpu_count(self, node: Node) -> int:
        return len(node.gpus.all())

    @admin.action(description="Cordon the selected nodes (no new placements)")
    def cordon(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        for node in queryset:
            job_actions.set_cordon(node.pk, True, f"Cordoned by {request.user.username}")
        self.message_user(request, f"{queryset.count()} node(s) cordoned.", messages.SUCCESS)

    @admin.action(description="Reclaim from spot jobs (they pause and resume elsewhere; the node is cordoned)")
    def reclaim(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        count = sum(hardware.reclaim_from_spot(node.pk, f"node {node.name} reclaimed by {request.user.username}") for node in queryset)
        self.message_user(request, f"{count} spot job(s) interrupted.", messages.SUCCESS)

    @admin.action(description="Uncordon the selected nodes")
    def uncordon(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        for node in queryset:
            job_actions.set_cordon(node.pk, False)
        self.message_user(request, f"{queryset.count()} node(s) uncordoned.", messages.SUCCESS)


@admin.register(NodeToken)
class NodeTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "is_active", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name"]
    readonly_fields = ["name", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # minted with `manage.py nodetoken NAME`, so the token is shown once

    @admin.display(boolean=True, description="Active")
    def is_active(self, token: NodeToken) -> bool:
        return token.is_active

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[NodeToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"{count} token(s) revoked; their agents are refused from now on.", messages.SUCCESS)


class PlacementInline(admin.TabularInline):
    model = Placement
    extra = 0
    readonly_fields = ["node", "node_name", "role", "node_rank", "gpu_indices", "state", "exit_code", "exit_signal", "message", "output_url", "started_at", "ended_at"]
    can_delete = False


@admin.register(JobAttempt)
class JobAttemptAdmin(admin.ModelAdmin):
    list_display = ["job", "number", "master_addr", "master_port", "created_at", "running_at", "ended_at", "cause"]
    list_filter = [("ended_at", admin.EmptyFieldListFilter)]
    search_fields = ["job__name", "cause"]
    list_select_related = ["job"]
    inlines = [PlacementInline]
    # the attempt's storage key is the console's to mint and revoke (jobs.storage.credentials)
    exclude = ["storage_secret_encrypted"]
    readonly_fields = ["storage_access_key", "storage_revoked_at"]


@admin.register(Placement)
class PlacementAdmin(admin.ModelAdmin):
    list_display = ["attempt", "role", "node_name", "state", "exit_code", "exit_signal", "started_at", "ended_at"]
    list_filter = ["state", "role"]
    search_fields = ["node_name", "attempt__job__name", "message"]
    list_select_related = ["attempt__job"]


@admin.register(NodeGPU)
class NodeGPUAdmin(admin.ModelAdmin):
    list_display = ["node", "index", "model", "memory_gb", "healthy", "uuid"]
    list_filter = ["model", "healthy"]
    search_fields = ["node__name", "uuid"]
    list_select_related = ["node"]


@admin.register(HardwareEvent)
class HardwareEventAdmin(admin.ModelAdmin):
    list_display = ["occurred_at", "node", "gpu_index", "kind", "xid", "detail"]
    list_filter = ["kind", "node"]
    search_fields = ["node__name", "detail"]
    list_select_related = ["node"]
    date_hierarchy = "occurred_at"


@admin.register(RejectedAgentMessage)
class RejectedAgentMessageAdmin(admin.ModelAdmin):
    """What agents sent that the console refused: malformed, out of range, or not theirs to write."""

    list_display = ["received_at", "node_name", "msg_type", "msg_id", "reason"]
    list_filter = ["msg_type", "node_name"]
    search_fields = ["node_name", "reason", "body"]
    date_hierarchy = "received_at"
    readonly_fields = [f.name for f in RejectedAgentMessage._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ConsoleListening)
class ConsoleListeningAdmin(admin.ModelAdmin):
    """Since when the console has processed heartbeats without a gap (the watchdog's proof)."""

    list_display = ["listening_since", "alive_at", "read_lag_seconds"]
    search_fields = ["listening_since"]
    readonly_fields = ["listening_since", "alive_at", "read_lag_seconds", "read_lag_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
