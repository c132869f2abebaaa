"""REST endpoints of Training Workspaces: thin viewset over workspaces.actions; a user only
ever sees their own workspaces."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError
from django.db.models import Prefetch, QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from jobs.models import ServerType

from .. import actions
from ..models import Workspace, WorkspaceNode
from ..quotas import NON_FIELD
from ..validation import DUPLICATE_NAME_MESSAGE
from .serializers import WorkspaceSerializer


class WorkspaceViewSet(viewsets.ModelViewSet):
    serializer_class = WorkspaceSerializer
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[Workspace]:
        if getattr(self, "swagger_fake_view", False):  # drf-spectacular reading the types: no user
            return Workspace.objects.none()
        return (
            Workspace.objects.filter(owner=self.request.user).select_related("server_type")
            .prefetch_related(Prefetch("reservations", queryset=WorkspaceNode.objects.order_by("reserved_at")), "status_changes")
        )

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "server_types": list(ServerType.objects.all())}

    def perform_create(self, serializer: WorkspaceSerializer) -> None:
        try:
            serializer.instance = actions.create_workspace(self.request.user, serializer.validated_data)
        except IntegrityError:  # the same name posted twice at once: the unique constraint decides
            raise serializers.ValidationError({"name": DUPLICATE_NAME_MESSAGE})

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        workspace = self.get_object()
        serializer = self.get_serializer(workspace, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        if "node_count" in serializer.validated_data:
            try:
                actions.resize_workspace(workspace.pk, serializer.validated_data["node_count"], serializer.validated_data.get("when_busy"))
            except actions.ResizeRefused as refused:
                raise serializers.ValidationError({NON_FIELD: [str(refused)]})
        return Response(self.get_serializer(self.get_queryset().get(pk=workspace.pk)).data)

    @extend_schema(responses={
        202: OpenApiResponse(WorkspaceSerializer, description="nodes are still busy: the workspace is Terminating"),
        204: OpenApiResponse(description="cancelled"),
    })
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        workspace = self.get_object()
        if actions.cancel_workspace(workspace.pk) == "terminating":
            return Response(self.get_serializer(self.get_queryset().get(pk=workspace.pk)).data, status=status.HTTP_202_ACCEPTED)
        return Response(status=status.HTTP_204_NO_CONTENT)
