"""Staff endpoints for nodes: list, detail, fault injection (simulated GPUs), spot reclaim."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response

from nodeagent.protocol import FAULT_KINDS
from nodeagent.protocol_checks import MAX_INT, MAX_SMALLINT

from ..models import Node
from ..scheduling.capacity import GpuState, GpuUse, NodeLedger
from ..scheduling.capacity_load import load_ledger
from . import hardware


class GpuSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    model = serializers.CharField()
    memory_gb = serializers.IntegerField()
    healthy = serializers.BooleanField()
    held_by = serializers.ChoiceField(
        choices=[u.value for u in GpuUse],
        help_text="free, unhealthy, job (a running placement), stopping (released by `until` at the latest), "
                  "warm (kept for its last job's owner until `until`; any job that would wait takes it)",
    )
    job_id = serializers.IntegerField(allow_null=True)
    job_name = serializers.CharField(allow_null=True)
    until = serializers.DateTimeField(allow_null=True)


class NodeSerializer(serializers.ModelSerializer):
    server_type = serializers.CharField(source="server_type.name")
    status = serializers.SerializerMethodField()
    gpus = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = ["id", "name", "status", "server_type", "address", "runtime", "connected", "cordoned",
                  "cordon_reason", "last_heartbeat_at", "gpus"]

    def _ledger(self, node: Node) -> NodeLedger | None:
        return self.context["ledger"].nodes.get(node.pk)

    def get_status(self, node: Node) -> str:
        ledger = self._ledger(node)
        return node.status(busy=bool(ledger and ledger.busy))

    @extend_schema_field(GpuSerializer(many=True))
    def get_gpus(self, node: Node) -> list[dict[str, Any]]:
        ledger = self._ledger(node)
        return [
            {"index": g.index, "model": g.model, "memory_gb": g.memory_gb, "healthy": g.healthy,
             **holder(ledger.gpus.get(g.index) if ledger else None)}
            for g in node.gpus.all()
        ]


def holder(state: GpuState | None) -> dict[str, Any]:
    """Who holds a GPU, as the capacity ledger says (the same as the scheduler reads)."""
    if state is None or state.hold is None:
        return {"held_by": state.use.value if state else GpuUse.FREE.value, "job_id": None, "job_name": None, "until": None}
    return {
        "held_by": state.use.value, "job_id": state.hold.job_id, "job_name": state.hold.job_name,
        "until": state.until.isoformat() if state.until else None,
    }


class FaultRequest(serializers.Serializer):
    kind = serializers.ChoiceField(choices=FAULT_KINDS)
    # the bounds of the columns the agent's fault report is stored in (HardwareEvent.gpu_index, .xid)
    gpu_index = serializers.IntegerField(min_value=0, max_value=MAX_SMALLINT, required=False, allow_null=True, default=None)
    xid = serializers.IntegerField(min_value=1, max_value=MAX_INT, required=False, allow_null=True, default=None)
    detail = serializers.CharField(required=False, allow_blank=True, default="", max_length=200)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["kind"] == "xid" and attrs["xid"] is None:
            raise serializers.ValidationError({"xid": "An XID fault needs its XID number, e.g. 79."})
        return attrs


class FaultSent(serializers.Serializer):
    detail = serializers.CharField()
    fault = FaultRequest(help_text="the fault as the node's agent received it")


class Detail(serializers.Serializer):
    detail = serializers.CharField()


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = NodeSerializer
    permission_classes = [IsAdminUser]
    queryset = Node.objects.select_related("server_type").prefetch_related("gpus")

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "ledger": load_ledger()}

    @extend_schema(responses={202: FaultSent, 409: Detail})
    @action(detail=True, methods=["post"], url_path="inject-fault", serializer_class=FaultRequest)
    def inject_fault(self, request: Request, pk: str | None = None) -> Response:
        """Make a simulated GPU of this node fail (XID, ECC, row remap, NVLink, GPU lost, …)."""
        node = self.get_object()
        fault = FaultRequest(data=request.data)
        fault.is_valid(raise_exception=True)
        if not node.connected:
            return Response({"detail": f"node {node.name} is not connected"}, status=status.HTTP_409_CONFLICT)
        hardware.inject_fault(node.pk, **fault.validated_data)
        return Response({"detail": f"fault sent to node {node.name}", "fault": fault.validated_data},
                        status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={200: Detail})
    @action(detail=True, methods=["post"], url_path="reclaim", serializer_class=serializers.Serializer)
    def reclaim(self, request: Request, pk: str | None = None) -> Response:
        """Take the node back from spot jobs: they pause (with their checkpoint) and resume elsewhere later."""
        node = self.get_object()
        count = hardware.reclaim_from_spot(node.pk, f"node {node.name} reclaimed by {request.user.username}")
        return Response({"detail": f"{count} spot job(s) interrupted on {node.name}"})
