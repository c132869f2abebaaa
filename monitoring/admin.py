from django.contrib import admin

from .models import LogLine


@admin.register(LogLine)
class LogLineAdmin(admin.ModelAdmin):
    list_display = ["job", "stream", "attempt", "seq", "ts", "text"]
    list_filter = ["stream"]
    search_fields = ["job__name", "text"]
    list_select_related = ["job"]
    show_full_result_count = False  # the table is large; counting it on every page is slow
