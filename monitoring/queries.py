"""Reading log lines for pages, the API and the browser WebSocket."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import connection

from .log_cursor import Positions, advance
from .models import LogLine

BACKLOG_LINES = 1000


def as_dict(line: LogLine) -> dict[str, Any]:
    return {
        "id": line.id, "stream": line.stream, "attempt": line.attempt, "seq": line.seq,
        "ts": line.ts.timestamp(), "text": line.text,
    }


def streams(job_id: int) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(_STREAMS_SQL, {"job": job_id})
        names = [row[0] for row in cursor.fetchall()]
    # master first, then workers by number
    return sorted(names, key=lambda s: (s != "master", len(s), s))


def since(job_id: int, after_id: int = 0, stream: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
    """Lines with an id above `after_id`, by id (the deprecated `since` of the API: it can skip
    lines that commit out of id order; `after` cannot)."""
    lines = LogLine.objects.filter(job_id=job_id, id__gt=after_id)
    if stream:
        lines = lines.filter(stream=stream)
    return [as_dict(line) for line in lines.order_by("id")[:limit]]


def all_lines(job_id: int, stream: str | None = None) -> Iterator[tuple[datetime, str, str]]:
    lines = LogLine.objects.filter(job_id=job_id)
    if stream:
        lines = lines.filter(stream=stream)
    return lines.order_by("ts", "attempt", "seq").values_list("ts", "stream", "text").iterator(chunk_size=5000)



@dataclass(frozen=True)
class Page:
    """Lines and the cursor positions after them (monitoring.log_cursor)."""

    lines: list[dict[str, Any]]
    positions: Positions
    full: bool = False  # the limit was reached: more lines are readable now


_TABLE = LogLine._meta.db_table
# each stream read by its own index range (job, stream, id), merged by id
_AFTER_SQL = f"""
    SELECT l.id, l.stream, l.attempt, l.seq, extract(epoch from l.ts), l.text
    FROM unnest(%(streams)s::text[], %(after)s::bigint[]) AS c(stream, after)
    CROSS JOIN LATERAL (
        SELECT * FROM {_TABLE} WHERE job_id = %(job)s AND stream = c.stream AND id > c.after
        ORDER BY id LIMIT %(limit)s
    ) l
    ORDER BY l.id LIMIT %(limit)s
"""
# one statement, so the positions (each stream's newest id) match the lines read with them
_TAIL_SQL = f"""
    SELECT c.stream, c.top, l.id, l.attempt, l.seq, extract(epoch from l.ts), l.text
    FROM (SELECT s.stream, (SELECT max(id) FROM {_TABLE} WHERE job_id = %(job)s AND stream = s.stream) AS top
          FROM unnest(%(streams)s::text[]) AS s(stream)) c
    LEFT JOIN LATERAL (
        SELECT * FROM {_TABLE} WHERE job_id = %(job)s AND stream = c.stream ORDER BY id DESC LIMIT %(limit)s
    ) l ON true
"""
# the distinct streams of a job, one index probe each (no skip scan before PostgreSQL 18)
_STREAMS_SQL = f"""
    WITH RECURSIVE s(stream) AS (
        (SELECT stream FROM {_TABLE} WHERE job_id = %(job)s ORDER BY stream LIMIT 1)
        UNION ALL
        SELECT (SELECT stream FROM {_TABLE} WHERE job_id = %(job)s AND stream > s.stream ORDER BY stream LIMIT 1)
        FROM s WHERE s.stream IS NOT NULL
    )
    SELECT stream FROM s WHERE stream IS NOT NULL
"""


def _line(id_: int, stream: str, attempt: int, seq: int, ts: Decimal, text: str) -> dict[str, Any]:
    return {"id": id_, "stream": stream, "attempt": attempt, "seq": seq, "ts": float(ts), "text": text}


def after(job_id: int, positions: Positions | None = None, stream: str | None = None, limit: int = 1000) -> Page:
    """The next `limit` lines after `positions` (all streams, or one), by id; none is skipped."""
    positions = positions or {}
    names = [stream] if stream else streams(job_id)
    with connection.cursor() as cursor:
        cursor.execute(_AFTER_SQL, {"job": job_id, "streams": names, "after": [positions.get(n, 0) for n in names],
                                    "limit": limit})
        lines = [_line(*row) for row in cursor.fetchall()]
    return Page(lines, advance(positions, lines), full=len(lines) == limit)


def tail(job_id: int, limit: int = BACKLOG_LINES) -> Page:
    """The newest `limit` lines (oldest first) and the positions after every stored line."""
    with connection.cursor() as cursor:
        cursor.execute(_TAIL_SQL, {"job": job_id, "streams": streams(job_id), "limit": limit})
        rows = cursor.fetchall()
    positions = {name: top for name, top, *_ in rows if top is not None}
    newest = sorted((row for row in rows if row[2] is not None), key=lambda row: row[2])[-limit:]
    return Page([_line(id_, name, *rest) for name, _, id_, *rest in newest], positions)


def count_after(job_id: int, positions: Positions, at_most: int) -> int:
    """How many lines lie after `positions` (counting stops at `at_most`)."""
    return len(after(job_id, positions, limit=at_most).lines)
