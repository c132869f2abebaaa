"""Log download (the Logs tab itself is part of the job detail page)."""

from __future__ import annotations

from datetime import UTC

from django.http import HttpRequest, StreamingHttpResponse
from django.shortcuts import get_object_or_404

from jobs.models import TrainingJob

from . import queries


def download_logs(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    job = get_object_or_404(TrainingJob, pk=pk, owner=request.user)
    stream = request.GET.get("stream") or None

    def lines():
        for ts, name, text in queries.all_lines(job.pk, stream):
            yield f"{ts.astimezone(UTC).isoformat(timespec='milliseconds')} [{name}] {text}\n"

    response = StreamingHttpResponse(lines(), content_type="text/plain; charset=utf-8")
    filename = f"{job.name}-{stream or 'all'}.log"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
