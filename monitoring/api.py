"""`/api/v1/training-jobs/{id}/logs/`: a job's log lines, paged by an opaque cursor.

A client polls with `cursor=` set to the `next` of the previous answer and gets every line
once, whichever stream it is in and in whatever order the agents' batches committed
(monitoring.log_cursor holds, per stream, the last line read). `since=<line id>` still answers as before but is deprecated: row ids
become visible out of order, so polling by id can skip lines.
"""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from console.lib.api_schema import QUERY_ERRORS
from jobs.models import TrainingJob

from . import log_cursor, queries

MAX_LIMIT = 5000
MAX_BIGINT = 2**63 - 1


class LogQuery(serializers.Serializer):
    stream = serializers.CharField(required=False, allow_blank=True, max_length=32)
    cursor = serializers.CharField(required=False, allow_blank=True, max_length=log_cursor.MAX_CHARS)
    since = serializers.IntegerField(required=False, min_value=0, max_value=MAX_BIGINT)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_LIMIT, default=1000)

    def validate_cursor(self, value: str) -> log_cursor.Positions:
        if not value:
            return {}
        try:
            return log_cursor.decode(value)
        except log_cursor.BadCursor as exc:
            raise serializers.ValidationError(str(exc)) from exc

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "since" in attrs and "cursor" in attrs:
            raise serializers.ValidationError({"since": "use either cursor or the deprecated since, not both"})
        return attrs


class LogLineSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    stream = serializers.CharField(help_text="master, worker-1, … (one stream per node role)")
    attempt = serializers.IntegerField()
    seq = serializers.IntegerField(help_text="the line's number within its stream and attempt")
    ts = serializers.FloatField(help_text="when the line was printed (unix seconds)")
    text = serializers.CharField()


class LogPageSerializer(serializers.Serializer):
    job = serializers.IntegerField()
    streams = serializers.ListField(child=serializers.CharField())
    lines = LogLineSerializer(many=True, help_text="by id; within a stream, in the order they were stored")
    next = serializers.CharField(
        required=False,
        help_text="pass as `cursor` to get the lines stored after these (absent with the deprecated `since`)",
    )
    more = serializers.BooleanField(help_text="true: the limit was reached and more lines are ready: ask again at once")
    next_since = serializers.IntegerField(
        required=False, help_text="deprecated (only with `since`): the highest line id in this answer",
    )


class JobLogsView(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("stream", str, description="master, worker-1, … (all streams when absent)"),
            OpenApiParameter("cursor", str, description="`next` of the previous answer (from the first line when absent)"),
            OpenApiParameter("since", {"type": "integer", "minimum": 0, "maximum": MAX_BIGINT}, deprecated=True,
                             description="deprecated: lines with an id above this; can skip lines stored "
                                         "concurrently — use `cursor`"),
            OpenApiParameter("limit", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 1000},
                             description=f"at most this many lines (1–{MAX_LIMIT}, default 1000)"),
        ],
        responses={200: LogPageSerializer, 400: QUERY_ERRORS},
    )
    def get(self, request: Request, pk: int) -> Response:
        job = get_object_or_404(TrainingJob, pk=pk, owner=request.user)
        query = LogQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        stream = params.get("stream") or None
        if "since" in params:
            return Response(self._since(job.pk, params["since"], stream, params["limit"]))
        page = queries.after(job.pk, params.get("cursor"), stream, params["limit"])
        return Response({
            "job": job.pk,
            "streams": queries.streams(job.pk),
            "lines": page.lines,
            "next": log_cursor.encode(page.positions),
            "more": page.full,
        })

    @staticmethod
    def _since(job_id: int, since: int, stream: str | None, limit: int) -> dict[str, Any]:
        lines = queries.since(job_id, since, stream, limit)
        return {  # no `next`: a gap-free position cannot be derived from a line id
            "job": job_id,
            "streams": queries.streams(job_id),
            "lines": lines,
            "more": len(lines) == limit,
            "next_since": lines[-1]["id"] if lines else since,
        }
