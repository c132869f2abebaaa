"""Storing log batches from agents, once each, and fanning them out to browsers."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction

from console.lib import live
from jobs.channel.writes import placement_target, placement_targets
from jobs.models import TrainingJob
from jobs.sql import bulk
from nodeagent import protocol_checks

from .events import LogLinesEvent, logs_group
from .models import LogLine

log = logging.getLogger(__name__)
# agents split longer lines (nodeagent.logstream) and the console refuses longer ones; the cut
# below only guards what other writers store
MAX_LINE_CHARS = protocol_checks.MAX_LINE_CHARS


def store_batch(batch: dict[str, Any], node_id: int) -> int:
    """Store a `logs` message of node `node_id`; lines of a superseded attempt or a deleted job
    are dropped, lines of a job the node does not run are refused (jobs.channel.writes).

    Returns how many lines were offered for insert (re-sent ones are ignored by the unique key).
    """
    job_id, attempt, stream = batch["job_id"], batch["attempt"], batch["stream"]
    target = placement_target(node_id, job_id, attempt, stream)
    if target is None or not target.current:
        log.info("dropped %d lines of job %s attempt %s (superseded or deleted)", len(batch["lines"]), job_id, attempt)
        return 0
    return _store(job_id, stream, attempt, batch["lines"])


def store_batches(batches: Sequence[tuple[int, dict[str, Any]]]) -> list[str]:
    """Store several nodes' `logs` messages ((node id, message)) in one INSERT, as store_batch
    each would; for each, the reason it is refused, or "" (stored, or dropped as stale). Run
    inside the caller's transaction: the lines go to watchers once it commits."""
    targets = placement_targets((node_id, b["job_id"], b["attempt"], b["stream"]) for node_id, b in batches)
    refusals, kept = [], []
    for node_id, b in batches:
        target = targets[(node_id, b["job_id"], b["attempt"], b["stream"])]
        refusals.append(target if isinstance(target, str) else "")
        if target is None or isinstance(target, str) or not target.current:
            if not isinstance(target, str):
                log.info("dropped %d lines of job %s attempt %s (superseded or deleted)", len(b["lines"]), b["job_id"], b["attempt"])
            continue
        kept.append(b)
    if kept:
        lines = [(b, line) for b in kept for line in b["lines"]]
        with connection.cursor() as cursor:
            cursor.execute(_INSERT_MANY_SQL, [bulk.rows_param([
                [b["job_id"] for b, _ in lines], [b["stream"] for b, _ in lines], [b["attempt"] for b, _ in lines],
                *_columns([line for _, line in lines]),
            ])])
        transaction.on_commit(lambda: publish_many_lines(kept))
    return refusals


def store_lines(job_id: int, stream: str, attempt: int, lines: list[list[Any]]) -> int:
    """Store lines whose sender the caller authorized (a Slurm run's launcher for its own role);
    those of an attempt that is no longer current, or of a deleted job, are dropped."""
    current = TrainingJob.objects.filter(pk=job_id).values_list("current_attempt", flat=True).first()
    if current != attempt:
        return 0
    return _store(job_id, stream, attempt, lines)


def _store(job_id: int, stream: str, attempt: int, lines: list[list[Any]]) -> int:
    _insert_postgresql(job_id, stream, attempt, lines)
    publish_lines(job_id, stream, attempt, lines)
    return len(lines)


# One parameter, the lines as rows (jobs.sql.bulk.rows_param), instead of 6 × N placeholders:
# PostgreSQL parses one short statement and the driver binds one string, which is what makes
# 20k+ lines/s possible here.
_LINE_COLUMNS = {"s": "bigint", "t": "double precision", "x": "text"}
_INSERT_SQL = f"""
    INSERT INTO {LogLine._meta.db_table} (job_id, stream, attempt, seq, ts, text)
    SELECT %s, %s, %s, v.s, to_timestamp(v.t), v.x FROM {bulk.rows_from(_LINE_COLUMNS)} AS v
    ON CONFLICT (job_id, stream, attempt, seq) DO NOTHING
"""


# several streams' lines at once (store_batches): the stream of each line in its row too
_INSERT_MANY_SQL = f"""
    INSERT INTO {LogLine._meta.db_table} (job_id, stream, attempt, seq, ts, text)
    SELECT v.j, v.st, v.a, v.s, to_timestamp(v.t), v.x
    FROM {bulk.rows_from({"j": "bigint", "st": "text", "a": "integer", **_LINE_COLUMNS})} AS v
    ON CONFLICT (job_id, stream, attempt, seq) DO NOTHING
"""


def _columns(lines: list[list[Any]]) -> tuple[list[Any], list[Any], list[Any]]:
    """Sequence numbers, times and texts (cut, without NUL, which PostgreSQL's text refuses)."""
    return [line[0] for line in lines], [line[1] for line in lines], [line[2][:MAX_LINE_CHARS].replace("\x00", "") for line in lines]


def _insert_postgresql(job_id: int, stream: str, attempt: int, lines: list[list[Any]]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_INSERT_SQL, [job_id, stream, attempt, bulk.rows_param(_columns(lines))])


def _lines_event(job_id: int, stream: str, attempt: int, lines: list[list[Any]]) -> tuple[str, dict[str, Any]]:
    event = LogLinesEvent(
        type="log.lines", stream=stream, attempt=attempt,
        lines=[[seq, ts, text[:MAX_LINE_CHARS]] for seq, ts, text in lines],
    )
    return logs_group(job_id), dict(event)


def publish_lines(job_id: int, stream: str, attempt: int, lines: list[list[Any]]) -> None:
    if lines:
        live.publish(*_lines_event(job_id, stream, attempt, lines))  # lost: a watcher catches up from its cursor


def publish_many_lines(batches: Sequence[dict[str, Any]]) -> None:
    """Several `logs` messages' lines to their watchers, in one hand-over."""
    live.publish_many([_lines_event(b["job_id"], b["stream"], b["attempt"], b["lines"]) for b in batches if b["lines"]])
