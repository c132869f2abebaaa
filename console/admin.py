"""The audit log in the admin: read-only, newest first, filtered by action and actor."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from .lib.audit import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "actor_name", "action", "target", "detail"]
    list_filter = ["action", ("actor", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["actor_name", "target", "detail"]
    date_hierarchy = "created_at"
    list_select_related = False  # actor_name is on the row: no join for the list
    readonly_fields = ["created_at", "actor", "actor_name", "action", "target", "detail"]

    # a record of what happened: nobody adds, edits or deletes one by hand
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AuditEvent | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AuditEvent | None = None) -> bool:
        return False
