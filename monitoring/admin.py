from django.contrib import admin
from django.http import HttpRequest

from .models import LogLine, MetricSeries


@admin.register(LogLine)
class LogLineAdmin(admin.ModelAdmin):
    list_display = ["job", "stream", "attempt", "seq", "ts", "text"]
    list_filter = ["stream"]
    search_fields = ["job__name", "text"]
    list_select_related = ["job"]
    show_full_result_count = False  # the table is large; counting it on every page is slow


@admin.register(MetricSeries)
class MetricSeriesAdmin(admin.ModelAdmin):
    """Read-only: series are created by ingestion and removed by retention."""

    list_display = ["metric", "node", "gpu", "job_id", "stream", "namespace"]
    list_filter = ["metric"]
    search_fields = ["key", "node"]
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: MetricSeries | None = None) -> bool:
        return False
