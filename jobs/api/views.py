"""REST endpoints: thin viewsets over jobs.actions; a user only ever sees their own jobs."""

from __future__ import annotations

from django.db import IntegrityError
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.response import Response

from console.api_schema import QUERY_ERRORS
from workspaces.usage import bill_queryset

from .. import actions
from ..filters import JobFilter
from ..models import ServerType, TrainingJob
from ..validation import DUPLICATE_NAME_MESSAGE
from .serializers import ServerTypeSerializer, TrainingJobSerializer

# Token first: DRF answers a missing or wrong credential with the first class's challenge,
# so API clients get 401 + `WWW-Authenticate: Token` instead of a bare 403.
AUTHENTICATION = [TokenAuthentication, SessionAuthentication]


class TrainingJobViewSet(viewsets.ModelViewSet):
    authentication_classes = AUTHENTICATION
    serializer_class = TrainingJobSerializer
    filter_backends = [DjangoFilterBackend]
    filterset_class = JobFilter
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # drf-spectacular reading the types: no user
            return TrainingJob.objects.none()
        return (
            bill_queryset()  # with what the cost reads (workspaces.usage.job_bill)
            .filter(owner=self.request.user)
            .select_related("workspace")
            .prefetch_related("tags", "status_changes")
        )

    def filter_queryset(self, queryset):
        # the filters are the list's: one job's URL answers the same whatever its query string
        return super().filter_queryset(queryset) if self.action == "list" else queryset

    @extend_schema(responses={200: TrainingJobSerializer(many=True), 400: QUERY_ERRORS})
    def list(self, request, *args, **kwargs):
        """The caller's jobs, filtered (jobs.filters.JobFilter, shared with the list page)."""
        return super().list(request, *args, **kwargs)

    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        tags = data.pop("tags", [])
        password = data.pop("registry_password", "")
        try:
            serializer.instance = actions.create_job(self.request.user, data, tags, password)
        except IntegrityError:  # the same name posted twice at once: the unique constraint decides
            raise serializers.ValidationError({"name": DUPLICATE_NAME_MESSAGE})

    def perform_update(self, serializer):
        if "tags" in serializer.validated_data:
            actions.replace_tags(serializer.instance, serializer.validated_data["tags"])

    def update(self, request, *args, **kwargs):
        response = super().update(request, *args, **kwargs)
        job = self.get_queryset().get(pk=kwargs["pk"])
        response.data = self.get_serializer(job).data
        return response

    @extend_schema(responses={
        202: OpenApiResponse(TrainingJobSerializer, description="the job holds nodes: it is Terminating and goes once they stopped"),
        204: OpenApiResponse(description="deleted"),
    })
    def destroy(self, request, *args, **kwargs):
        job = self.get_object()
        outcome = actions.delete_job(job.pk)
        if outcome == "terminating":
            job.refresh_from_db()
            return Response(self.get_serializer(job).data, status=status.HTTP_202_ACCEPTED)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ServerTypeViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    authentication_classes = AUTHENTICATION
    serializer_class = ServerTypeSerializer
    queryset = ServerType.objects.all()
    lookup_field = "name"
