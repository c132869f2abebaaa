"""Log download (the Logs and Monitoring tabs are part of the job detail page), the service dashboard."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC

from django.db.models import Q
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from jobs.choices import JobStatus
from jobs.models import Placement, TrainingJob
from jobs.models.attempts import HOLDING_STATES

from . import catalog, metric_queries, queries, usage

GPU_HOLDING_STATUSES = (JobStatus.CREATING, JobStatus.RUNNING)


def download_logs(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    job = get_object_or_404(TrainingJob, pk=pk, owner=request.user)
    stream = request.GET.get("stream") or None

    def lines() -> Iterator[str]:
        for ts, name, text in queries.all_lines(job.pk, stream):
            yield f"{ts.astimezone(UTC).isoformat(timespec='milliseconds')} [{name}] {text}\n"

    response = StreamingHttpResponse(lines(), content_type="text/plain; charset=utf-8")
    filename = f"{job.name}-{stream or 'all'}.log"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def dashboard(request: HttpRequest) -> HttpResponse:
    """The service dashboard, there for every user without setting anything up: running jobs
    with their key metrics and a utilisation sparkline, GPUs in use, GPU-hours this month."""
    now = timezone.now()
    jobs = list(
        TrainingJob.objects.filter(owner=request.user, status__in=GPU_HOLDING_STATUSES)
        .select_related("server_type").order_by("-created_at")
    )
    ids = [job.pk for job in jobs]
    placements = Placement.objects.filter(attempt__job__owner=request.user)
    in_use = sum(len(indices) for indices in placements.filter(state__in=HOLDING_STATES).values_list("gpu_indices", flat=True))
    month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    this_month = placements.filter(started_at__isnull=False).filter(Q(ended_at__isnull=True) | Q(ended_at__gte=month))
    hours = usage.gpu_hours(((s, e, len(g)) for s, e, g in this_month.values_list("started_at", "ended_at", "gpu_indices")), month, now)
    summaries = usage.summarise(_job_samples(ids, now.timestamp()), now.timestamp()) if ids else {}
    rows = [(job, summaries.get(job.pk, usage.JobSummary())) for job in jobs]
    return render(request, "monitoring/dashboard.html", {
        "rows": [(job, [(m, summary.current.get(m.name)) for m in catalog.KEY_METRICS]) for job, summary in rows],
        "key_metrics": catalog.KEY_METRICS,
        "sparks": {job.pk: summary.spark for job, summary in rows},
        "gpus_in_use": in_use,
        "gpu_hours": hours,
        "month": month,
    })


def _job_samples(job_ids: list[int], now: float) -> Iterator[tuple[int, str, float, float]]:
    """(job, metric, ts, value): utilisation over the sparkline hour, other key metrics over the
    dashboard's "now" window only (an hour of every key metric would be 5× the rows)."""
    key = [m.name for m in catalog.KEY_METRICS if m.name != "GPUUtilization"]
    for names, since in ((["GPUUtilization"], now - 3600), (key, now - usage.CURRENT_WINDOW)):
        for series, ts, value in metric_queries.recent_samples({"job_id__in": job_ids}, names, since):
            yield series["job_id"], series["metric"], ts, value
