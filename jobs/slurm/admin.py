"""Staff register Slurm clusters here; the Slurm jobs and runs are shown read-only."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.utils import timezone

from .batch_script import launcher_words
from .client import SlurmError
from .models import SlurmCluster, SlurmJob, SlurmRun, decode_key


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
            "spot_partition", "gpus_per_node", "console_url", "launcher", "work_dir", "jobcomp_path",
            "stop_grace_seconds", "gpu_metrics", "metrics_interval_seconds",
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

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(SlurmCluster)
class SlurmClusterAdmin(admin.ModelAdmin):
    form = SlurmClusterForm
    list_display = ["name", "server_type", "enabled", "rest_url", "api_version", "user_name", "on_demand_partition",
                    "spot_partition", "gpus_per_node", "slurm_version", "last_checked_at", "last_error"]
    list_filter = ["enabled", "api_version"]
    search_fields = ["name", "rest_url", "user_name"]
    readonly_fields = ["slurm_version", "last_checked_at", "last_error", "created_at"]
    actions = ["check_connection"]

    @admin.action(description="Check the connection (ping, token, partitions)")
    def check_connection(self, request, queryset) -> None:
        for cluster in queryset:
            try:
                client = cluster.client(timeout=5)
                version = client.ping()
                partitions = set(client.partitions())
            except (SlurmError, ValueError) as exc:
                SlurmCluster.objects.filter(pk=cluster.pk).update(last_checked_at=timezone.now(), last_error=str(exc)[:500])
                self.message_user(request, f"{cluster.name}: {exc}", messages.ERROR)
                continue
            missing = [p for p in (cluster.on_demand_partition, cluster.spot_partition) if p not in partitions]
            error = f"no partition {', '.join(missing)} (Slurm has {', '.join(sorted(partitions))})" if missing else ""
            SlurmCluster.objects.filter(pk=cluster.pk).update(slurm_version=version, last_checked_at=timezone.now(), last_error=error)
            if error:
                self.message_user(request, f"{cluster.name}: Slurm {version} answers, but there is {error}", messages.ERROR)
            else:
                self.message_user(request, f"{cluster.name}: Slurm {version} answers; partitions found", messages.SUCCESS)


@admin.register(SlurmJob)
class SlurmJobAdmin(admin.ModelAdmin):
    """Read-only: the poll (jobs.slurm.sync) writes these rows."""

    list_display = ["training_job_id", "job", "cluster", "slurm_job_id", "state", "reason", "restart_count",
                    "submitted_at", "cancel_sent_at", "finished_at"]
    list_filter = ["cluster", "state"]
    search_fields = ["slurm_job_id", "training_job_id", "job__name"]
    list_select_related = ["job", "cluster"]
    inlines = [SlurmRunInline]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
