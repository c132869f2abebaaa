"""Staff register Slurm clusters here; the Slurm jobs and runs are shown read-only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from .backend import request_pass
from .batch_script import launcher_words
from .client import SlurmError
from .models import SlurmAccount, SlurmCluster, SlurmJob, SlurmRun, check_cluster, decode_key


class SlurmClusterForm(forms.ModelForm):
    """The signing key and the token are write-only: typed in, stored encrypted, never shown back."""

    jwt_key = forms.CharField(
        label="JWT signing key", required=False, widget=forms.PasswordInput(render_value=False),
        help_text="The cluster's AuthAltParameters jwt_key file in base64 (base64 -w0 jwt_hs256.key): the console "
                  "mints short-lived tokens for the service user. Leave empty to keep the stored one.",
    )
    token = forms.CharField(
        label="Token", required=False, widget=forms.PasswordInput(render_value=False),
        help_text="Instead of the key: a token from `scontrol token username=SERVICE_USER lifespan=…` "
                  "(it stops working when its lifespan ends). Leave empty to keep the stored one.",
    )

    class Meta:
        model = SlurmCluster
        fields = [
            "name", "server_type", "enabled", "rest_url", "api_version", "user_name", "on_demand_partition",
            "spot_partition", "gpus_per_node", "gpu_type", "constraint", "qos", "spot_qos", "default_account",
            "default_time_limit_minutes", "max_time_limit_minutes", "extra_sbatch_options", "console_url", "launcher",
            "work_dir", "jobcomp_path", "accounting", "stop_grace_seconds", "gpu_metrics", "metrics_interval_seconds",
        ]

    def clean_launcher(self) -> str:
        value = self.cleaned_data["launcher"]
        try:
            launcher_words(value)
        except ValueError as exc:
            raise ValidationError(f"Not a command line: {exc}") from exc
        return value

    def clean_jwt_key(self) -> bytes:
        text = self.cleaned_data.get("jwt_key", "")
        return decode_key(text) if text.strip() else b""

    def _post_clean(self) -> None:
        # the secrets must be on the instance before the model's clean() asks for one of them
        if self.cleaned_data.get("jwt_key"):
            self.instance.set_jwt_key(self.cleaned_data["jwt_key"])
        if self.cleaned_data.get("token", "").strip():
            self.instance.set_token(self.cleaned_data["token"])
        super()._post_clean()


class SlurmRunInline(admin.TabularInline):
    model = SlurmRun
    extra = 0
    can_delete = False
    fields = ["restart_count", "attempt", "nodes", "started_at", "ended_at", "state", "exit_code", "exit_signal"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class SlurmAccountInline(admin.TabularInline):
    """Console users and teams → Slurm accounts (and per-user Unix users) on this cluster."""

    model = SlurmAccount
    extra = 0
    fields = ["user", "team", "account", "unix_user"]
    autocomplete_fields = ["user", "team"]


@admin.register(SlurmCluster)
class SlurmClusterAdmin(admin.ModelAdmin):
    form = SlurmClusterForm
    inlines = [SlurmAccountInline]
    list_display = ["name", "server_type", "enabled", "rest_url", "api_version", "user_name", "on_demand_partition",
                    "spot_partition", "gpus_per_node", "slurm_version", "last_checked_at", "last_error"]
    list_filter = ["enabled", "api_version"]
    search_fields = ["name", "rest_url", "user_name"]
    readonly_fields = ["slurm_version", "last_checked_at", "last_error", "created_at"]
    actions = ["check_connection"]

    @admin.action(description="Check the connection (ping, token, partitions)")
    def check_connection(self, request: HttpRequest, queryset: QuerySet[SlurmCluster]) -> None:
        for cluster in queryset:
            ok, message = check_cluster(cluster)
            self.message_user(request, f"{cluster.name}: {message}", messages.SUCCESS if ok else messages.ERROR)


@admin.register(SlurmJob)
class SlurmJobAdmin(admin.ModelAdmin):
    """Read-only: the poll (jobs.slurm.sync) writes these rows."""

    list_display = ["training_job_id", "job", "cluster", "slurm_job_id", "state", "reason", "account", "run_as",
                    "restart_count", "submitted_at", "cancel_sent_at", "finished_at", "elapsed_seconds", "allocated_tres"]
    list_filter = ["cluster", "state"]
    search_fields = ["slurm_job_id", "training_job_id", "job__name"]
    list_select_related = ["job", "cluster"]
    inlines = [SlurmRunInline]
    actions = ["release_held"]

    @admin.action(description="Release held jobs in Slurm (scontrol release)")
    def release_held(self, request: HttpRequest, queryset: QuerySet[SlurmJob]) -> None:
        """A job Slurm holds (an admin or user hold, "launch failed requeued held") never starts by
        itself; check the node first when its launch failed. Needs a token Slurm lets release holds:
        the service user must be SlurmUser, root or a Slurm operator for an admin hold."""
        for slurm_job in queryset.select_related("cluster"):
            if slurm_job.slurm_job_id is None or slurm_job.finished_at is not None:
                self.message_user(request, f"{slurm_job}: not queued in Slurm", messages.WARNING)
                continue
            try:
                slurm_job.cluster.client(timeout=5).release(slurm_job.slurm_job_id)
            except SlurmError as exc:
                self.message_user(request, f"{slurm_job}: Slurm did not release it: {exc}", messages.ERROR)
                continue
            self.message_user(request, f"{slurm_job}: released; Slurm schedules it again", messages.SUCCESS)
            transaction.on_commit(request_pass)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
