"""Celery tasks of the monitoring app: metric roll-ups and retention (thin: see rollup_runs)."""

from __future__ import annotations

import dataclasses
from typing import Any

from celery import shared_task

from . import rollup_runs


@shared_task(acks_late=True, ignore_result=True)
def rollup_metrics() -> dict[str, Any]:
    """Recompute the recent 5-minute periods and every dirty one; idempotent."""
    return dataclasses.asdict(rollup_runs.run_rollup())


@shared_task(acks_late=True, ignore_result=True)
def purge_metrics() -> dict[str, Any]:
    """Apply METRICS_RAW_RETENTION_DAYS / METRICS_ROLLUP_RETENTION_DAYS; idempotent."""
    return dataclasses.asdict(rollup_runs.purge())
