"""The warm pool's entries (workspaces.warm_pool) read from the database.

An entry is a node where the agent keeps a prepared environment after one of its owner's jobs
ended there. Node-wide and independent of the GPUs' warm hold (jobs.scheduling.capacity): when another
job takes the GPUs, the files stay on the node for the keep-alive and the owner's next job
can still start warm there on other free GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F, Q, Value
from django.utils import timezone

from jobs.choices import TERMINAL_STATUSES, JobStatus
from jobs.models import Placement
from jobs.models.attempts import PlacementState

from .warm_pool import WarmEntry, newest


def keep_alive_window() -> timedelta:
    return timedelta(minutes=settings.WARM_POOL_MAX_KEEP_ALIVE_MINUTES)


def warm_entries(since: timedelta, owners: Iterable[int] | None = None, now: datetime | None = None,
                 live_only: bool = False) -> list[WarmEntry]:
    """Environments kept on nodes after a job of their owner ended (newest per node and key);
    `live_only`: those still within their keep-alive (the scheduler's preference needs no more,
    and a busy cluster ends many jobs an hour that keep nothing)."""
    now = now or timezone.now()
    rows = Placement.objects.filter(
        ended_at__gte=now - since, node__isnull=False, state=PlacementState.EXITED,
        attempt__job__status__in=TERMINAL_STATUSES,
    )
    if live_only:
        rows = rows.filter(ended_at__gt=Value(now) - F("attempt__job__keep_alive_minutes") * Value(timedelta(minutes=1)))
    rows = rows.filter(
        # the environment was prepared on every node if the attempt got to run; a command that
        # ends at once can complete before its job was ever marked Running
        Q(attempt__running_at__isnull=False) | Q(attempt__job__status=JobStatus.COMPLETED),
    )
    if owners is not None:
        rows = rows.filter(attempt__job__owner_id__in=list(owners))
    values = rows.values_list(
        "node_id", "node_name", "attempt__job_id", "attempt__job__name", "attempt__job__owner_id",
        "attempt__job__server_type__name", "attempt__job__image_url", "attempt__job__script_url",
        "attempt__job__keep_alive_minutes", "ended_at",
    )
    cap = settings.WARM_POOL_MAX_KEEP_ALIVE_MINUTES  # a lowered maximum applies to older jobs too
    return newest(
        WarmEntry(
            node_id=node, node_name=node_name, owner_id=owner, job_id=job, job_name=name, server_type=server_type,
            image=image, script_url=script, ended_at=ended, expires_at=ended + timedelta(minutes=min(keep, cap)),
        )
        for node, node_name, job, name, owner, server_type, image, script, keep, ended in values
    )


def hold_lines(job: Any, now: datetime | None = None) -> list[str]:
    """What became of the warm hold on the GPUs the job's last attempt used (the job page)."""
    if job.status not in TERMINAL_STATUSES:
        return []
    now = now or timezone.now()
    cap = settings.WARM_POOL_MAX_KEEP_ALIVE_MINUTES
    keep = timedelta(minutes=min(job.keep_alive_minutes, cap))
    lines = []
    rows = Placement.objects.filter(attempt__job=job, attempt__number=job.current_attempt, ended_at__isnull=False)
    for p in rows.order_by("node_rank"):
        where = f"GPU{'s' if len(p.gpu_indices) != 1 else ''} {', '.join(map(str, p.gpu_indices))} on {p.node_name}"
        local = timezone.localtime
        if not keep:
            lines.append(f"{where}: not kept warm (keep-alive 0)")
        elif p.warm_released_at:
            lines.append(f"{where}: warm hold released at {local(p.warm_released_at):%H:%M:%S} for {p.warm_released_for}")
        elif p.state != PlacementState.EXITED:
            lines.append(f"{where}: not kept warm (the attempt did not end normally there)")
        elif p.ended_at + keep > now:
            lines.append(f"{where}: kept warm for your next compatible job until {local(p.ended_at + keep):%H:%M:%S}")
        else:
            lines.append(f"{where}: warm hold ended at {local(p.ended_at + keep):%H:%M:%S}")
    return lines
