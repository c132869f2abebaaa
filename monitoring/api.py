"""`/api/v1/training-jobs/{id}/logs/`: a job's log lines, paged by a `since` cursor."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs.models import TrainingJob

from . import queries

MAX_LIMIT = 5000


class LogQuery(serializers.Serializer):
    stream = serializers.CharField(required=False, allow_blank=True)
    since = serializers.IntegerField(required=False, min_value=0, default=0)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_LIMIT, default=1000)


class JobLogsView(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("stream", str, description="master, worker-1, … (all streams when absent)"),
            OpenApiParameter("since", int, description="return lines stored after this line id (the cursor)"),
            OpenApiParameter("limit", int, description=f"at most this many lines (1–{MAX_LIMIT})"),
        ],
        responses={200: dict},
    )
    def get(self, request: Request, pk: int) -> Response:
        job = get_object_or_404(TrainingJob, pk=pk, owner=request.user)
        query = LogQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        lines = queries.since(job.pk, params["since"], params.get("stream") or None, params["limit"])
        return Response({
            "job": job.pk,
            "streams": queries.streams(job.pk),
            "lines": lines,
            "next_since": lines[-1]["id"] if lines else params["since"],
        })
