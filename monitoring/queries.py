"""Reading log lines for pages, the API and the browser WebSocket."""

from __future__ import annotations

from .models import LogLine

BACKLOG_LINES = 1000


def as_dict(line: LogLine) -> dict:
    return {
        "id": line.id, "stream": line.stream, "attempt": line.attempt, "seq": line.seq,
        "ts": line.ts.timestamp(), "text": line.text,
    }


def streams(job_id: int) -> list[str]:
    names = set(LogLine.objects.filter(job_id=job_id).values_list("stream", flat=True).distinct())
    # master first, then workers by number
    return sorted(names, key=lambda s: (s != "master", len(s), s))


def backlog(job_id: int, stream: str | None = None, limit: int = BACKLOG_LINES) -> list[dict]:
    """The newest `limit` lines, oldest first."""
    lines = LogLine.objects.filter(job_id=job_id)
    if stream:
        lines = lines.filter(stream=stream)
    newest = list(lines.order_by("-ts", "-attempt", "-seq")[:limit])
    return [as_dict(line) for line in reversed(newest)]


def since(job_id: int, after_id: int = 0, stream: str | None = None, limit: int = 1000) -> list[dict]:
    """Lines stored after the line with id `after_id` (a cursor), in storage order."""
    lines = LogLine.objects.filter(job_id=job_id, id__gt=after_id)
    if stream:
        lines = lines.filter(stream=stream)
    return [as_dict(line) for line in lines.order_by("id")[:limit]]


def all_lines(job_id: int, stream: str | None = None):
    lines = LogLine.objects.filter(job_id=job_id)
    if stream:
        lines = lines.filter(stream=stream)
    return lines.order_by("ts", "attempt", "seq").values_list("ts", "stream", "text").iterator(chunk_size=5000)
