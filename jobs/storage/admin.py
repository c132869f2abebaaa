"""Storage spaces and keys minted ahead in the admin (registered from JobsConfig.ready): what
exists, never a secret; made and changed only by the console (jobs.storage.spaces)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .models import ReadyAttemptKey, StorageSpace


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(StorageSpace)
class StorageSpaceAdmin(_ReadOnly):
    list_display = ["bucket", "user", "access_key", "provisioned", "created_at", "rotated_at"]
    list_filter = ["provisioned"]
    search_fields = ["bucket", "user__username", "access_key"]
    list_select_related = ["user"]
    exclude = ["secret_key_encrypted"]


@admin.register(ReadyAttemptKey)
class ReadyAttemptKeyAdmin(_ReadOnly):
    list_display = ["__str__", "job", "number", "access_key", "created_at"]
    search_fields = ["job__name", "access_key"]
    list_select_related = ["job"]
    exclude = ["secret_encrypted"]
