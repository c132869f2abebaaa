"""API representations of Training Jobs and server types.

Validation is jobs.submission's, as the form's, so the API answers with the same messages;
field types are left loose on purpose (no DRF max_length) so those messages win.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from console.lib.fields import api_integer
from console.lib.validation import INTEGER_MESSAGE
from workspaces.admission import workspace_for
from workspaces.pricing import hourly_estimate
from workspaces.usage import job_bill

from ..choices import Framework, LearningType
from ..environments import offered
from ..models import JobStatusChange, ServerType, TrainingJob
from ..recovery import goodput_load
from ..recovery.goodput import Goodput
from ..storage.objectstore import result_url
from ..submission import check_new_job
from ..validation import (
    FRAMEWORK_MESSAGE,
    LEARNING_TYPE_MESSAGE,
    validate_job,
)


class _JobIdField(serializers.IntegerField):
    """A job named by its id: written as a number (jobs.submission checks whose it is), read as
    the stored id without loading that job (a list of jobs stays one query)."""

    def get_attribute(self, instance: TrainingJob) -> int | None:
        return instance.from_checkpoint_id

    def to_representation(self, value: int | None) -> int | None:
        return None if value is None else int(value)


class TagSerializer(serializers.Serializer):
    key = serializers.CharField(allow_blank=True, trim_whitespace=True)
    value = serializers.CharField(allow_blank=True, required=False, default="")


class InputSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="exposed to the job as $SIMPLEAI_INPUT_<NAME upper-cased>")
    url = serializers.CharField(help_text="s3://<your bucket>/key (an object) or s3://<your bucket>/prefix/ (a folder)")


@extend_schema_field(InputSerializer(many=True))
class _InputsField(serializers.JSONField):
    """Taken as it comes (jobs.validation.inputs_error says what is wrong, as on the form)."""


class AllocationSerializer(serializers.Serializer):
    name = serializers.CharField()
    gpus = serializers.IntegerField()
    vcpus = serializers.IntegerField()
    memory_gb = serializers.IntegerField()


class ServerTypeSerializer(serializers.ModelSerializer):
    allocations = AllocationSerializer(many=True, read_only=True)
    tflops = serializers.CharField(source="tflops_summary", read_only=True)

    class Meta:
        model = ServerType
        fields = [
            "name", "description", "gpu_model", "gpu_architecture", "gpus_per_node", "gpu_memory_gb",
            "vcpus", "memory_gb", "infiniband_gbps", "service_network_gbps", "nvswitch_gbs",
            "fp4_tflops", "fp8_tflops", "fp16_tflops", "tflops",
            "on_demand_price_per_gpu_hour", "spot_price_per_gpu_hour", "allocations",
        ]


class StatusChangeSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobStatusChange
        fields = ["old_status", "new_status", "reason", "created_at"]


def _hours(**kwargs: Any) -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=16, decimal_places=4, read_only=True, **kwargs)


def _dollars(**kwargs: Any) -> serializers.DecimalField:
    # rounded like the job page and the usage page (workspaces.pricing.money: to the cent, half up)
    return serializers.DecimalField(max_digits=16, decimal_places=2, rounding=ROUND_HALF_UP, read_only=True, **kwargs)


class AttemptCostSerializer(serializers.Serializer):
    """One attempt of a job's bill (workspaces.usage.AttemptBill)."""

    number = serializers.IntegerField(read_only=True)
    kind = serializers.CharField(read_only=True)
    run_gpu_hours = _hours(source="cost.run_gpu_hours")
    lost_gpu_hours = _hours(source="cost.lost_gpu_hours", help_text="redone after an interruption: not charged")
    charged_gpu_hours = _hours(source="cost.charged_gpu_hours")
    lost_seconds = serializers.FloatField(read_only=True)
    waited_seconds = serializers.FloatField(read_only=True, help_text="between this attempt and the next: nothing held")
    amount = _dollars(source="cost.amount")
    price_per_gpu_hour = serializers.DecimalField(max_digits=10, decimal_places=4, read_only=True)
    on_demand = serializers.BooleanField(read_only=True, help_text="a spot job's attempt on on-demand capacity after its fallback budget ran out")


class JobCostSerializer(serializers.Serializer):
    """What a job has cost so far (workspaces.usage.JobBill): the job page's "Cost and start"."""

    currency = serializers.SerializerMethodField()
    plan = serializers.CharField(read_only=True, help_text="on_demand, spot or workspace (covered by its contract)")
    price_per_gpu_hour = _hours()
    amount = _dollars(source="total.amount")
    run_gpu_hours = _hours(source="total.run_gpu_hours")
    charged_gpu_hours = _hours(source="total.charged_gpu_hours")
    lost_gpu_hours = _hours(source="total.lost_gpu_hours")
    credited = _dollars(source="total.credited", help_text="what the lost GPU-hours would have cost")
    attempts = AttemptCostSerializer(many=True, read_only=True)

    def get_currency(self, bill: Any) -> str:
        return "USD"  # prices are in dollars (the pages show "$")


class TrainingJobSerializer(serializers.ModelSerializer):
    name = serializers.CharField(allow_blank=True)
    learning_type = serializers.ChoiceField(
        choices=LearningType.choices, default=LearningType.ON_DEMAND,
        error_messages={"invalid_choice": LEARNING_TYPE_MESSAGE},
    )
    framework = serializers.ChoiceField(
        choices=Framework.choices, default=Framework.PYTORCH, error_messages={"invalid_choice": FRAMEWORK_MESSAGE},
    )
    server_type = serializers.CharField(allow_blank=True)
    framework_version = serializers.CharField(required=False, allow_blank=True)
    gpus_per_node = api_integer()
    # follows from the allocation (GPUs per node) when left out
    memory_gb = api_integer(required=False)
    node_count = api_integer(default=1)
    shm_size_gb = api_integer(default=64)
    image_url = serializers.CharField(allow_blank=True)
    registry_username = serializers.CharField(required=False, allow_blank=True, default="")
    registry_password = serializers.CharField(
        write_only=True, required=False, allow_blank=True, default="", style={"input_type": "password"},
    )
    volume_mount_path = serializers.CharField(required=False, allow_blank=True, default="")
    script_url = serializers.CharField(required=False, allow_blank=True, default="")
    command = serializers.CharField(allow_blank=True)
    # the user's project (simpleai run --workdir uploads it), its inputs and the job to start from
    workdir_url = serializers.CharField(required=False, allow_blank=True, default="")
    inputs = _InputsField(required=False, default=list, help_text='at most 16 of {"name": NAME, "url": "s3://…"}')
    from_checkpoint = _JobIdField(
        required=False, allow_null=True, default=None, error_messages={"invalid": INTEGER_MESSAGE},
        help_text="the id of one of your jobs with a checkpoint: this job starts from its newest one",
    )
    result_url = serializers.SerializerMethodField(help_text=(
        "where the job's OUTPUT_DIR is uploaded (s3://<your bucket>/jobs/<id>/attempt-<n>/, one folder per "
        "node role); empty before the job is placed"))
    tags = TagSerializer(many=True, required=False, default=list)
    # Training Workspace (its name; blank: the shared pool) and warm pool (rules: workspaces.admission)
    workspace = serializers.CharField(required=False, allow_blank=True, default="")
    keep_alive_minutes = serializers.IntegerField(default=10, error_messages={"invalid": INTEGER_MESSAGE})
    # spot only: interrupted and not resumed within it, the job resumes on on-demand capacity
    spot_fallback_after_minutes = serializers.IntegerField(
        required=False, allow_null=True, default=None, error_messages={"invalid": INTEGER_MESSAGE},
    )
    # Slurm-served server types only: --time in minutes; null for the cluster's default
    time_limit_minutes = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=1,
                                                  error_messages={"invalid": INTEGER_MESSAGE})
    has_registry_password = serializers.BooleanField(read_only=True)
    hourly_price = serializers.SerializerMethodField()
    cost = serializers.SerializerMethodField()
    history = StatusChangeSerializer(source="status_changes", many=True, read_only=True)

    class Meta:
        model = TrainingJob
        fields = [
            "id", "name", "learning_type", "framework", "framework_version", "failover_enabled",
            "server_type", "gpus_per_node", "memory_gb", "node_count", "shm_size_gb",
            "image_url", "registry_username", "registry_password", "has_registry_password",
            "volume_mount_path", "script_url", "command", "workdir_url", "inputs", "from_checkpoint", "result_url",
            "from_checkpoint_step", "checkpoint_step", "tags",
            "status", "status_reason", "created_at", "updated_at", "hourly_price", "cost", "history",
            "workspace", "keep_alive_minutes", "started_warm", "warm_note",
            "spot_fallback_after_minutes", "on_demand_since", "time_limit_minutes",
        ]
        read_only_fields = ["status", "status_reason", "created_at", "updated_at", "started_warm", "warm_note",
                            "from_checkpoint_step", "checkpoint_step", "on_demand_since"]

    def get_hourly_price(self, job: TrainingJob) -> str:
        price = job.server_type.price_per_gpu_hour(job.learning_type)
        return str(hourly_estimate(price, job.gpus_per_node, job.node_count))

    def get_result_url(self, job: TrainingJob) -> str:
        return result_url(job)

    @extend_schema_field(JobCostSerializer)
    def get_cost(self, job: TrainingJob) -> dict[str, Any]:
        return JobCostSerializer(job_bill(job)).data

    def to_representation(self, job: TrainingJob) -> dict[str, Any]:
        data = super().to_representation(job)
        if self.parent is None:  # one job (its page's API): a list would read every job's attempts
            data["goodput"] = goodput_data(goodput_load.job_goodput(job))
        data["server_type"] = job.server_type.name
        data["workspace"] = job.workspace.name if job.workspace_id else ""
        return data

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if self.instance is not None:
            return self._validate_update(attrs)
        owner = self.context["request"].user
        server_types = {st.name: st.info() for st in ServerType.objects.all()}
        errors = check_new_job(owner, attrs, server_types, offered.offered_versions())
        if errors:
            raise serializers.ValidationError(errors)
        attrs["workspace"] = workspace_for(owner, attrs.get("workspace"))
        return attrs

    def _validate_update(self, attrs: dict[str, Any]) -> dict[str, Any]:
        changed = set(self.initial_data) - {"tags"}
        if changed:
            raise serializers.ValidationError(
                {field: "Only tags can be changed after a Training Job is created." for field in sorted(changed)}
            )
        errors = validate_job({"tags": attrs.get("tags", [])}, {}, partial=True)
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


def goodput_data(found: Goodput) -> dict[str, Any]:
    """A job's goodput so far and the time each interruption lost (jobs.recovery.goodput), in seconds."""
    return {
        "ratio": None if found.ratio is None else round(found.ratio, 4),
        "wall_seconds": round(found.wall, 1), "productive_seconds": round(found.productive, 1),
        "lost": [{
            "attempt": loss.attempt, "fault_by": loss.fault_by, "fault_node": loss.fault_node, "cause": loss.cause,
            "detection_seconds": round(loss.detection, 1), "rescheduling_seconds": round(loss.rescheduling, 1),
            "preparation_seconds": round(loss.preparation, 1), "checkpoint_load_seconds": round(loss.checkpoint_load, 1),
            "steps_redone_seconds": round(loss.steps_redone, 1), "total_seconds": round(loss.total, 1),
            "charged_seconds": round(loss.charged, 1),
        } for loss in found.lost],
    }


def job_draft(validated: dict[str, Any]) -> dict[str, Any]:
    """A validated new job as plain API values (what `validate` answers): the workspace by name,
    tags as key/value pairs, and no registry password."""
    draft = {name: value for name, value in validated.items() if name not in {"registry_password", "workspace"}}
    draft["workspace"] = validated["workspace"].name if validated.get("workspace") else ""
    draft["tags"] = [{"key": tag["key"], "value": tag.get("value", "")} for tag in validated.get("tags", [])]
    return draft
