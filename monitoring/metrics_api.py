"""`/api/v1/training-jobs/{id}/metrics/`: a job's metric statistics as JSON or CSV."""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

from django.shortcuts import get_object_or_404
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from console.lib.api_schema import QUERY_ERRORS
from jobs.models import NodeGPU, TrainingJob
from nodeagent.gpus import SIMULATED_UUID_PREFIX

from . import catalog
from .metric_queries import Dimensions, QueryError, Result, query

DEFAULT_RANGE = 3600  # seconds, when no start is given


def parse_time(value: str) -> float:
    """ISO 8601 (a time without an offset is UTC) or unix seconds."""
    try:
        return float(value)
    except ValueError:
        pass
    parsed = parse_datetime(value.replace(" ", "T")) if value else None
    if parsed is None:
        raise serializers.ValidationError("use ISO 8601 (2025-01-31T12:00:00Z) or unix seconds")
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


class TimeField(serializers.CharField):
    def to_internal_value(self, data: object) -> float:
        return parse_time(str(super().to_internal_value(data)).strip())


class MetricQuery(serializers.Serializer):
    metric = serializers.ChoiceField(choices=[m.name for m in catalog.JOB_METRICS])
    statistic = serializers.ChoiceField(choices=[s.value for s in catalog.Statistic], required=False)
    period = serializers.IntegerField(required=False, min_value=1)
    start = TimeField(required=False)
    end = TimeField(required=False)
    gpu = serializers.IntegerField(required=False, min_value=0)
    node = serializers.CharField(required=False, max_length=63)
    stream = serializers.CharField(required=False, max_length=32)


def label(dimensions: dict[str, Any]) -> str:
    if "gpu" in dimensions:
        return f"{dimensions['node']} GPU {dimensions['gpu']}"
    return str(next(iter(dimensions.values()), ""))


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat().replace("+00:00", "Z")


def as_json(job_id: int, result: Result, simulated_nodes: Collection[str] = ()) -> dict[str, Any]:
    """`simulated_nodes`: nodes whose GPUs are simulated; their GPU lines say so (`simulated`,
    and the label), so no one reads a simulated 95 % as a real GPU's."""
    def simulated(dims: dict[str, Any]) -> bool:
        return "gpu" in dims and dims.get("node") in simulated_nodes

    return {
        "job": job_id, "namespace": catalog.NAMESPACE, "metric": result.metric.name, "unit": result.metric.unit,
        "statistic": str(result.statistic), "period": result.period, "source": result.source,
        "start": _iso(result.start), "end": _iso(result.end),
        "series": [
            {"dimensions": line.dimensions, "label": label(line.dimensions) + (" (simulated)" if simulated(line.dimensions) else ""),
             "simulated": simulated(line.dimensions),
             "points": [{"timestamp": _iso(t), "value": v, "sample_count": n} for t, v, n in line.points]}
            for line in result.lines
        ],
    }


def simulated_gpu_nodes(names: Collection[str]) -> set[str]:
    """Which of these nodes report simulated GPUs (nodeagent.gpus: their UUIDs say so)."""
    if not names:
        return set()
    return set(NodeGPU.objects.filter(node__name__in=names, uuid__startswith=SIMULATED_UUID_PREFIX)
               .values_list("node__name", flat=True))


class CSVRenderer(BaseRenderer):
    """One row per point; an error answer becomes `field,message` rows."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None,
               renderer_context: dict[str, Any] | None = None) -> bytes:
        out = io.StringIO()
        writer = csv.writer(out)
        if isinstance(data, dict) and "series" in data:
            writer.writerow(["timestamp", "metric", "statistic", "unit", "node", "gpu", "stream", "value", "sample_count"])
            for line in data["series"]:
                dims = line["dimensions"]
                for point in line["points"]:
                    writer.writerow([point["timestamp"], data["metric"], data["statistic"], data["unit"],
                                     dims.get("node", ""), dims.get("gpu", ""), dims.get("stream", ""),
                                     point["value"], point["sample_count"]])
        else:
            writer.writerow(["field", "message"])
            for name, messages in (data or {}).items():
                for message in messages if isinstance(messages, list) else [messages]:
                    writer.writerow([name, message])
        return out.getvalue().encode()


class JobMetricsView(APIView):
    renderer_classes = [JSONRenderer, BrowsableAPIRenderer, CSVRenderer]

    @extend_schema(
        parameters=[
            OpenApiParameter("metric", str, required=True, enum=[m.name for m in catalog.JOB_METRICS],
                             description="a metric name, e.g. GPUUtilization, TrainingLoss"),
            OpenApiParameter("statistic", str, enum=[s.value for s in catalog.Statistic],
                             description="Average, Minimum, Maximum, Sum or SampleCount (default: the metric's primary statistic)"),
            OpenApiParameter("period", {"type": "integer", "minimum": 1}, description="seconds per point: 1, 5, 10, 30 or a multiple of 60 (multiple of 300 for ranges over 6 h); default from the range"),
            OpenApiParameter("start", str, description="ISO 8601 or unix seconds (default: end − 1 hour)"),
            OpenApiParameter("end", str, description="ISO 8601 or unix seconds (default: now)"),
            OpenApiParameter("gpu", {"type": "integer", "minimum": 0}, description="only this GPU index"),
            OpenApiParameter("node", str, description="only this node"),
            OpenApiParameter("stream", str, description="only this stream (training metrics: master, worker-1, …)"),
            OpenApiParameter("format", str, enum=["json", "csv"], description="or send Accept: text/csv"),
        ],
        responses={200: dict, 400: QUERY_ERRORS},
    )
    def get(self, request: Request, pk: int) -> Response:
        job = get_object_or_404(TrainingJob, pk=pk, owner=request.user)
        params = MetricQuery(data=request.query_params)
        params.is_valid(raise_exception=True)
        p = params.validated_data
        metric = catalog.METRICS[p["metric"]]
        now = time.time()
        end = p.get("end", now)
        start = p.get("start", end - DEFAULT_RANGE)
        dims = Dimensions(job_id=job.pk, node=p.get("node"), gpu=p.get("gpu"), stream=p.get("stream"))
        try:
            result = query(metric, catalog.Statistic(p.get("statistic") or metric.primary), start, end, p.get("period"), dims, now)
        except QueryError as exc:
            raise serializers.ValidationError({exc.field: [str(exc)]}) from exc
        gpu_nodes = {line.dimensions["node"] for line in result.lines if "gpu" in line.dimensions}
        response = Response(as_json(job.pk, result, simulated_gpu_nodes(gpu_nodes)))
        if getattr(request.accepted_renderer, "format", "") == "csv":
            response["Content-Disposition"] = f'attachment; filename="{job.name}-{metric.name}.csv"'
        return response
