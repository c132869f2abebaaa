"""REST endpoints: thin viewsets over jobs.actions; a user only ever sees their own jobs."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from console.lib.api_schema import QUERY_ERRORS, VALIDATION_ERROR_SCHEMA, ErrorSerializer
from console.lib.api_strict import StrictFilterBackend
from workspaces.usage import bill_queryset

from .. import actions
from ..filters import JobFilter
from ..models import ServerType, TrainingJob
from ..storage.checkpoint_copy import CopyFailed
from ..validation import DUPLICATE_NAME_MESSAGE
from .serializers import ServerTypeSerializer, TrainingJobSerializer, job_draft

STOPPED_BY_USER = "Stopped by the user"


class TrainingJobViewSet(viewsets.ModelViewSet):
    serializer_class = TrainingJobSerializer
    filter_backends = [StrictFilterBackend]  # an empty or repeated filter is a 400, not "any"
    filterset_class = JobFilter
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[TrainingJob]:
        if getattr(self, "swagger_fake_view", False):  # drf-spectacular reading the types: no user
            return TrainingJob.objects.none()
        return (
            bill_queryset()  # with what the cost reads (workspaces.usage.job_bill)
            .filter(owner=self.request.user)
            .select_related("workspace")
            .prefetch_related("tags", "status_changes")
        )

    def filter_queryset(self, queryset: QuerySet[TrainingJob]) -> QuerySet[TrainingJob]:
        # the filters are the list's: one job's URL answers the same whatever its query string
        return super().filter_queryset(queryset) if self.action == "list" else queryset

    @extend_schema(responses={200: TrainingJobSerializer(many=True), 400: QUERY_ERRORS})
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """The caller's jobs, filtered (jobs.filters.JobFilter, shared with the list page)."""
        return super().list(request, *args, **kwargs)

    def perform_create(self, serializer: TrainingJobSerializer) -> None:
        data = dict(serializer.validated_data)
        tags = data.pop("tags", [])
        password = data.pop("registry_password", "")
        try:
            serializer.instance = actions.create_job(self.request.user, data, tags, password)
        except IntegrityError:  # the same name posted twice at once: the unique constraint decides
            raise serializers.ValidationError({"name": DUPLICATE_NAME_MESSAGE})
        except CopyFailed as exc:  # nothing was created
            raise serializers.ValidationError({"from_checkpoint": [str(exc)]})

    def perform_update(self, serializer: TrainingJobSerializer) -> None:
        if "tags" in serializer.validated_data:
            actions.replace_tags(serializer.instance, serializer.validated_data["tags"])

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response = super().update(request, *args, **kwargs)
        job = self.get_queryset().get(pk=kwargs["pk"])
        response.data = self.get_serializer(job).data
        return response

    @extend_schema(responses={
        202: OpenApiResponse(TrainingJobSerializer, description="the job holds nodes: it is Terminating and goes once they stopped"),
        204: OpenApiResponse(description="deleted"),
    })
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        job = self.get_object()
        outcome = actions.delete_job(job.pk)
        if outcome == "terminating":
            job.refresh_from_db()
            return Response(self.get_serializer(job).data, status=status.HTTP_202_ACCEPTED)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={
        200: OpenApiResponse(TrainingJobSerializer, description="stopped: its agents stop its processes"),
        409: OpenApiResponse(ErrorSerializer, description="the job has ended or is being deleted: nothing to stop"),
    })
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        """Stop a job that waits or runs (its processes get SIGTERM, then SIGKILL after the stop
        grace); it stays in the list as Stopped."""
        job = self.get_object()
        if not actions.stop_job(job.pk, STOPPED_BY_USER):
            job.refresh_from_db(fields=["status"])
            return Response({"detail": f"This Training Job is {job.status}: only a job that waits or runs can be stopped."},
                            status=status.HTTP_409_CONFLICT)
        return Response(self.get_serializer(self.get_queryset().get(pk=job.pk)).data)

    @extend_schema(request=TrainingJobSerializer, responses={
        200: OpenApiResponse(
            {"type": "object", "additionalProperties": {}},
            description="valid: the job as it would be created, with the defaults filled in (nothing is saved)",
        ),
        400: OpenApiResponse(VALIDATION_ERROR_SCHEMA, description="each invalid field with its messages, as a create answers"),
    })
    @action(detail=False, methods=["post"])
    def validate(self, request: Request) -> Response:
        """Check a new job as `POST /api/v1/training-jobs/` would, without creating it: the same
        rules and messages (the `simpleai` command checks a job before it uploads anything)."""
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return Response(job_draft(serializer.validated_data))


class ServerTypeViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = ServerTypeSerializer
    queryset = ServerType.objects.all()
    lookup_field = "name"
