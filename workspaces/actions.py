"""Every change to a Training Workspace goes through these functions.

Each is atomic, locks the workspace row, writes a history row for a status change, and takes
the scheduler's lock before it changes which nodes a workspace holds (reservations are what
the scheduler reads). Reconciling happens in the same transaction, so a page shows the
outcome at once; the beat task `workspaces.tasks.reconcile_workspaces` finishes what has to
wait (free nodes, jobs to stop).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from django.db import transaction

from jobs.channel.notify import schedule_on_commit
from jobs.choices import TERMINAL_STATUSES, JobStatus
from jobs.models import Placement, ServerType
from jobs.models.attempts import HOLDING_STATES
from jobs.scheduling.locks import take_scheduler_lock

from .choices import WhenBusy, WorkspaceStatus
from .models import ContractTerm, Workspace, WorkspaceNode, WorkspaceStatusChange
from .pricing import contract_rate
from .reservations import reconcile
from .status import move


class ResizeRefused(Exception):
    """The new node count cannot be applied; the message is shown to the user as is."""


@transaction.atomic
def create_workspace(owner: Any, fields: Mapping[str, Any]) -> Workspace:
    """Create a workspace in Creating from validated fields and reserve what is free now."""
    server_type = fields["server_type"]
    if not isinstance(server_type, ServerType):
        server_type = ServerType.objects.get(name=server_type)
    term = ContractTerm.objects.get(months=fields["contract_months"])
    workspace = Workspace.objects.create(
        owner=owner, name=fields["name"], server_type=server_type, gpus_per_node=fields["gpus_per_node"],
        memory_gb=fields["memory_gb"], node_count=fields["node_count"], contract_months=term.months,
        discount_percent=term.discount_percent,
        price_per_gpu_hour=contract_rate(server_type.on_demand_price_per_gpu_hour, Decimal(term.discount_percent)),
        status=WorkspaceStatus.CREATING, status_reason="Reserving nodes",
    )
    WorkspaceStatusChange.objects.create(workspace=workspace, new_status=workspace.status, reason="Created")
    take_scheduler_lock()
    reconcile(workspace)
    return workspace


def _locked(workspace_id: int) -> Workspace:
    return Workspace.objects.select_for_update().select_related("server_type").get(pk=workspace_id)


def _busy(rows: list[WorkspaceNode]) -> dict[int, set[str]]:
    busy: dict[int, set[str]] = {}
    holding = Placement.objects.filter(node_id__in=[r.node_id for r in rows], state__in=HOLDING_STATES)
    for node_id, job_name in holding.values_list("node_id", "attempt__job__name"):
        busy.setdefault(node_id, set()).add(job_name)
    return busy


def _check_jobs_fit(workspace: Workspace, node_count: int) -> None:
    too_big = (
        workspace.jobs.exclude(status__in=[*TERMINAL_STATUSES, JobStatus.TERMINATING])
        .filter(node_count__gt=node_count).values_list("name", "node_count")
    )
    if too_big:
        name, needed = too_big[0]
        raise ResizeRefused(
            f"Job {name} in this workspace needs {needed} nodes; it must end (or be deleted) "
            f"before the workspace shrinks below {needed}."
        )


def _plan_shrink(workspace: Workspace, node_count: int, when_busy: str) -> list[WorkspaceNode]:
    """The busy nodes to drain (empty when idle ones suffice); raises ResizeRefused."""
    rows = list(WorkspaceNode.objects.filter(workspace=workspace, released_at__isnull=True, draining=False).order_by("node_name"))
    excess = len(rows) - node_count
    if excess <= 0:
        return []
    busy = _busy(rows)
    idle = [r for r in rows if r.node_id not in busy]
    if len(idle) >= excess:
        return []
    running = [r for r in rows if r.node_id in busy]
    if when_busy != WhenBusy.DRAIN:
        detail = "; ".join(f"{r.node_name} runs {', '.join(sorted(busy[r.node_id]))}" for r in running)
        raise ResizeRefused(
            f"Cannot shrink to {node_count} node(s) now: only {len(idle)} of the {len(rows)} nodes are idle "
            f"({detail}). Stop those jobs first, or choose to drain: busy nodes are released when their jobs end."
        )
    return running[: excess - len(idle)]


@transaction.atomic
def resize_workspace(workspace_id: int, node_count: int, when_busy: str = WhenBusy.REFUSE) -> Workspace:
    """Change the node count. Growing waits for free nodes; shrinking releases idle nodes at
    once and never a node that runs a job: it refuses, or (drain) releases it when the job ends."""
    take_scheduler_lock()
    workspace = _locked(workspace_id)
    if workspace.status == WorkspaceStatus.TERMINATING:
        raise ResizeRefused(f"Training Workspace {workspace.name} is terminating; it cannot be changed.")
    if node_count == workspace.node_count:
        return workspace
    _check_jobs_fit(workspace, node_count)
    drain = _plan_shrink(workspace, node_count, when_busy)
    WorkspaceNode.objects.filter(pk__in=[r.pk for r in drain]).update(draining=True)
    direction = "Growing" if node_count > workspace.node_count else "Shrinking"
    old = workspace.node_count
    workspace.node_count = node_count
    workspace.save(update_fields=["node_count", "updated_at"])
    move(workspace, WorkspaceStatus.UPDATING, f"{direction} from {old} to {node_count} node(s)")
    reconcile(workspace)
    schedule_on_commit()
    return workspace


@transaction.atomic
def cancel_workspace(workspace_id: int, reason: str = "Cancelled by the user") -> str:
    """Cancel the service: its jobs stop, then its nodes go back and the row is deleted.
    Returns "deleted" when that happened at once, else "terminating"."""
    take_scheduler_lock()
    workspace = Workspace.objects.select_for_update().select_related("server_type").filter(pk=workspace_id).first()
    if workspace is None:
        return "deleted"
    if workspace.status != WorkspaceStatus.TERMINATING:
        move(workspace, WorkspaceStatus.TERMINATING, reason)
    reconcile(workspace)
    schedule_on_commit()
    return "terminating" if Workspace.objects.filter(pk=workspace_id).exists() else "deleted"

