"""The capacity ledger (jobs.scheduling.capacity) read from the database in a constant number of queries."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F, Q, Value
from django.utils import timezone

from ..choices import TERMINAL_STATUSES, JobStatus, LearningType
from ..models import Node, NodeGPU, Placement
from ..models.attempts import HOLDING_STATES, PlacementState
from . import policy
from .capacity import JobHold, Ledger, NodeInfo, Reservation, WarmHold, build

# the agent reports a stop after SIGTERM → grace → SIGKILL; this much longer is left for the report
STOP_REPORT_MARGIN = timedelta(seconds=10)


def stop_grace() -> timedelta:
    """How long a placement of a stopped job still holds its GPUs."""
    return timedelta(seconds=settings.JOB_STOP_GRACE_SECONDS) + STOP_REPORT_MARGIN


def node_infos() -> list[NodeInfo]:
    gpus: dict[int, list[tuple[int, bool]]] = defaultdict(list)
    for node_id, index, healthy in NodeGPU.objects.values_list("node_id", "index", "healthy"):
        gpus[node_id].append((index, healthy))
    rows = Node.objects.values_list("pk", "name", "server_type__name", "connected", "lost", "cordoned", "cordon_reason")
    return [
        NodeInfo(
            node_id=pk, name=name, server_type=server_type,
            gpus=tuple(sorted(i for i, _ in gpus[pk])),
            unhealthy=frozenset(i for i, healthy in gpus[pk] if not healthy),
            online=connected and not lost, cordoned=cordoned, cordon_reason=cordon_reason,
        )
        for pk, name, server_type, connected, lost, cordoned, cordon_reason in rows
    ]


def job_holds() -> list[JobHold]:
    rows = Placement.objects.filter(state__in=HOLDING_STATES, node__isnull=False).order_by("pk").values_list(
        "pk", "node_id", "gpu_indices", "attempt__job_id", "attempt__job__name", "attempt__job__owner_id",
        "attempt__job__learning_type", "attempt__job__workspace_id", "attempt__created_at",
        "attempt__stop_requested_at", "attempt__job__on_demand_since",
    )
    return [
        JobHold(
            node_id=node_id, gpus=tuple(gpus), job_id=job_id, job_name=name, owner_id=owner, placement_id=pk,
            # a spot job that fell back to on-demand capacity is no longer preempted
            spot=learning_type == LearningType.SPOT and fallen is None, workspace_id=workspace,
            started=created.timestamp(), stop_requested_at=stop,
        )
        for pk, node_id, gpus, job_id, name, owner, learning_type, workspace, created, stop, fallen in rows
    ]


def warm_holds(now: datetime) -> list[WarmHold]:
    """GPUs of finished placements within their job's keep-alive, not yet taken by another job."""
    cap = settings.WARM_POOL_MAX_KEEP_ALIVE_MINUTES  # a lowered maximum applies to older jobs too
    rows = Placement.objects.filter(
        state=PlacementState.EXITED, node__isnull=False, warm_released_at__isnull=True,
        ended_at__gte=now - timedelta(minutes=cap), attempt__job__status__in=TERMINAL_STATUSES,
        attempt__job__keep_alive_minutes__gt=0,
        # within its own keep-alive: a busy cluster ends many jobs an hour whose holds are over
        ended_at__gt=Value(now) - F("attempt__job__keep_alive_minutes") * Value(timedelta(minutes=1)),
    ).filter(
        # the environment was prepared only if the attempt got to run (or completed at once)
        Q(attempt__running_at__isnull=False) | Q(attempt__job__status=JobStatus.COMPLETED),
    ).order_by("pk").values_list(
        "pk", "node_id", "gpu_indices", "attempt__job_id", "attempt__job__name", "attempt__job__owner_id",
        "attempt__job__keep_alive_minutes", "ended_at",
    )
    return [
        WarmHold(
            node_id=node_id, gpus=tuple(gpus), placement_id=pk, job_id=job_id, job_name=name, owner_id=owner,
            expires_at=ended + timedelta(minutes=min(keep, cap)),
        )
        for pk, node_id, gpus, job_id, name, owner, keep, ended in rows
    ]


def load_ledger(now: datetime | None = None, reservations: list[Reservation] | None = None) -> Ledger:
    now = now or timezone.now()
    if reservations is None:
        reservations = policy.current().reservations()
    return build(node_infos(), job_holds(), warm_holds(now), reservations, now, stop_grace())
