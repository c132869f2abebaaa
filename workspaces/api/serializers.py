"""API representation of Training Workspaces; rules and messages are the form's
(workspaces.forms.check_workspace), field types are loose on purpose so those messages win."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from console.lib.fields import api_integer
from jobs.validation import node_count_error

from ..choices import WhenBusy
from ..forms import check_workspace
from ..models import Workspace, WorkspaceStatusChange
from ..pricing import money, total_cost
from ..usage import workspace_spans


class HistorySerializer(serializers.ModelSerializer):
    class Meta:
        model = WorkspaceStatusChange
        fields = ["old_status", "new_status", "reason", "created_at"]


class WorkspaceSerializer(serializers.ModelSerializer):
    name = serializers.CharField(allow_blank=True)
    server_type = serializers.CharField(allow_blank=True)
    gpus_per_node = api_integer()
    memory_gb = api_integer(required=False)  # follows from the allocation when left out
    node_count = api_integer()
    contract_months = api_integer()
    when_busy = serializers.ChoiceField(
        choices=WhenBusy.choices, write_only=True, required=False, default=WhenBusy.REFUSE,
        help_text="PATCH node_count: refuse (default) or drain when nodes to release run jobs",
    )
    reserved_nodes = serializers.SerializerMethodField()
    estimate = serializers.SerializerMethodField()
    billed_so_far = serializers.SerializerMethodField()
    history = HistorySerializer(source="status_changes", many=True, read_only=True)

    class Meta:
        model = Workspace
        fields = [
            "id", "name", "server_type", "gpus_per_node", "memory_gb", "node_count", "contract_months", "when_busy",
            "discount_percent", "price_per_gpu_hour", "status", "status_reason", "reserved_nodes", "estimate",
            "billed_so_far", "created_at", "updated_at", "history",
        ]
        read_only_fields = ["discount_percent", "price_per_gpu_hour", "status", "status_reason", "created_at", "updated_at"]

    def get_reserved_nodes(self, workspace: Workspace) -> list[str]:
        return sorted(r.node_name for r in workspace.reservations.all() if r.released_at is None)

    def get_estimate(self, workspace: Workspace) -> dict[str, str]:
        estimate = workspace.estimate()
        return {"hourly": str(estimate.hourly), "monthly": str(estimate.monthly), "contract_total": str(estimate.contract_total)}

    def get_billed_so_far(self, workspace: Workspace) -> str:
        return str(money(total_cost(workspace_spans(workspace)).amount))

    def to_representation(self, workspace: Workspace) -> dict[str, Any]:
        data = super().to_representation(workspace)
        data["server_type"] = workspace.server_type.name
        return data

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if self.instance is not None:
            return self._validate_update(attrs)
        attrs.pop("when_busy", None)
        errors = check_workspace(self.context["request"].user, attrs, self.context["server_types"])
        if errors:
            raise serializers.ValidationError(errors)
        return attrs

    def _validate_update(self, attrs: dict[str, Any]) -> dict[str, Any]:
        changed = set(self.initial_data) - {"node_count", "when_busy"}
        if changed:
            raise serializers.ValidationError(
                {field: "Only the number of nodes can be changed after a Training Workspace is created." for field in sorted(changed)}
            )
        if "node_count" in self.initial_data and (message := node_count_error(attrs.get("node_count"))):
            raise serializers.ValidationError({"node_count": message})
        return attrs
