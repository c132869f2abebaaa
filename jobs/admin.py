from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from .models import JobStatusChange, JobTag, ServerType, TrainingEnvironment, TrainingJob


class JobTagInline(admin.TabularInline):
    model = JobTag
    extra = 0


class JobStatusChangeInline(admin.TabularInline):
    model = JobStatusChange
    extra = 0
    can_delete = False
    readonly_fields = ["old_status", "new_status", "reason", "created_at"]

    def has_add_permission(self, request: HttpRequest, obj: TrainingJob | None = None) -> bool:
        return False


@admin.register(TrainingJob)
class TrainingJobAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "status", "learning_type", "server_type", "node_count", "gpus_per_node", "failover_enabled", "created_at"]
    list_filter = ["status", "learning_type", "framework", "server_type", "failover_enabled"]
    search_fields = ["name", "owner__username", "tags__key", "tags__value", "image_url"]
    list_select_related = ["owner", "server_type"]
    date_hierarchy = "created_at"
    # the password is write-only everywhere; what jobs.actions writes is read-only here
    exclude = ["registry_password_encrypted"]
    readonly_fields = [
        "status", "status_reason", "current_attempt", "result_url", "failover_count", "checkpoint_step",
        "checkpoint_url", "checkpoint_at", "started_warm", "warm_note", "created_at", "updated_at", "slurm_request",
    ]
    inlines = [JobTagInline, JobStatusChangeInline]

    @admin.display(description="Slurm request")
    def slurm_request(self, job: TrainingJob) -> str:
        """What the console sends to Slurm for this job (sbatch line, JSON, script), before it is sent."""
        from django.utils.html import format_html

        from .slurm.job_request import preview

        return format_html("<pre style='white-space: pre-wrap'>{}</pre>", preview(job)) if job.pk else "-"


@admin.register(ServerType)
class ServerTypeAdmin(admin.ModelAdmin):
    list_display = ["name", "gpu_model", "gpus_per_node", "vcpus", "memory_gb", "infiniband_gbps", "on_demand_price_per_gpu_hour", "spot_price_per_gpu_hour"]
    list_filter = ["gpu_architecture", "gpus_per_node"]
    search_fields = ["name", "gpu_model", "description"]


@admin.register(JobTag)
class JobTagAdmin(admin.ModelAdmin):
    list_display = ["key", "value", "job", "owner"]
    list_filter = ["job__status"]
    search_fields = ["key", "value", "job__name", "job__owner__username"]
    list_select_related = ["job__owner"]

    @admin.display(ordering="job__owner__username")
    def owner(self, tag: JobTag) -> str:
        return tag.job.owner.username


@admin.register(JobStatusChange)
class JobStatusChangeAdmin(admin.ModelAdmin):
    """Read-only: history is written by jobs.actions.transition alone, never by hand."""

    list_display = ["job", "old_status", "new_status", "reason", "created_at"]
    list_filter = ["new_status", "old_status", "created_at"]
    search_fields = ["job__name", "reason"]
    list_select_related = ["job"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: JobStatusChange | None = None) -> bool:
        return False


@admin.register(TrainingEnvironment)
class TrainingEnvironmentAdmin(admin.ModelAdmin):
    """A (framework, version) the creation form offers: its pinned list, or the image holding it."""

    list_display = ["name", "framework", "version", "enabled", "holds", "image", "updated_at"]
    list_filter = ["framework", "enabled"]
    search_fields = ["name", "version", "requirements", "image", "description"]
    fields = ["name", "framework", "version", "requirements", "image", "description", "enabled"]

    @admin.display(description="Holds")
    def holds(self, environment: TrainingEnvironment) -> str:
        return environment.holds()
