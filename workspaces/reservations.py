"""Node reservations of Training Workspaces: take free nodes, release idle ones, drain busy ones.

Level-triggered like the scheduler: `reconcile_all` compares what each workspace should hold
with what it holds and moves one step towards it; running it twice changes nothing. It runs
under the scheduler's lock (jobs.scheduling.locks): a node must not be reserved by a workspace in the
same moment the scheduler gives it to a shared-pool job, and a node must not be released
while the scheduler places a workspace job on it. Which nodes are idle comes from the capacity
ledger (jobs.scheduling.capacity), like everything the scheduler decides on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone

from jobs import actions as job_actions
from jobs.channel.notify import schedule_on_commit
from jobs.models import Placement, TrainingJob
from jobs.models.attempts import HOLDING_STATES
from jobs.scheduling.capacity import GpuUse, Ledger, NodeLedger, Reservation
from jobs.scheduling.capacity_load import load_ledger
from jobs.scheduling.locks import take_scheduler_lock

from .choices import WorkspaceStatus
from .models import Workspace, WorkspaceNode
from .status import move, remove, set_reason
from .usage import archive_workspace

log = logging.getLogger(__name__)

def active_reservations() -> list[Reservation]:
    """Every node a workspace holds now, as the capacity ledger reads it."""
    rows = WorkspaceNode.objects.filter(released_at__isnull=True, node__isnull=False).values_list(
        "node_id", "workspace_id", "workspace__name", "workspace__owner_id", "draining",
    )
    return [Reservation(node, workspace, name, owner, draining) for node, workspace, name, owner, draining in rows]


def _idle(node: NodeLedger) -> bool:
    return node.schedulable and node.reservation is None and not node.busy


def free_nodes(workspace: Workspace, ledger: Ledger) -> list[NodeLedger]:
    """Nodes the workspace may take now, by name: idle, of its server type, and with enough
    healthy GPUs for its allocation. GPUs held warm do not stop it: warm holds are a cache."""
    return sorted(
        (
            n for n in ledger.nodes.values()
            if _idle(n) and n.node.server_type == workspace.server_type.name
            and len(n.node.gpus) - len(n.node.unhealthy) >= workspace.gpus_per_node
        ),
        key=lambda n: n.node.name,
    )


def free_node_counts() -> dict[str, int]:
    """Server type name → how many whole nodes a new workspace could take now."""
    counts: dict[str, int] = {}
    for node in load_ledger().nodes.values():
        if _idle(node) and not node.node.unhealthy:
            counts[node.node.server_type] = counts.get(node.node.server_type, 0) + 1
    return counts


def _busy_jobs(ledger: Ledger, node_ids: Iterable[int]) -> dict[int, list[str]]:
    """Node id → names of the jobs holding GPUs on it."""
    busy: dict[int, list[str]] = {}
    for node_id in node_ids:
        node = ledger.nodes.get(node_id)
        if node is None:
            continue
        names = sorted({s.hold.job_name for s in node.gpus.values() if s.use in (GpuUse.JOB, GpuUse.STOPPING) and s.hold})
        if names:
            busy[node_id] = names
    return busy


def _release(rows: Iterable[WorkspaceNode], ledger: Ledger) -> list[str]:
    now, names = timezone.now(), []
    for row in rows:
        row.released_at, row.draining = now, False
        row.save(update_fields=["released_at", "draining"])
        if row.node_id in ledger.nodes:
            ledger.nodes[row.node_id].reservation = None
        names.append(row.node_name)
    if names:
        schedule_on_commit()  # the nodes are back in the shared pool
    return names


def _take(workspace: Workspace, node: NodeLedger, ledger: Ledger) -> WorkspaceNode:
    now = timezone.now()
    row = WorkspaceNode.objects.create(workspace=workspace, node_id=node.node.node_id, node_name=node.node.name, reserved_at=now)
    node.reservation = Reservation(node.node.node_id, workspace.pk, workspace.name, workspace.owner_id)
    # warm holds on the node end: the workspace's owner now holds it all
    held = {s.hold.placement_id for s in node.gpus.values() if s.use is GpuUse.WARM and s.hold is not None}
    Placement.objects.filter(pk__in=held, warm_released_at__isnull=True).update(
        warm_released_at=now, warm_released_for=f"a Training Workspace reserving {node.node.name}",
    )
    return row


def _unhealthy(rows: list[WorkspaceNode]) -> list[str]:
    problems = []
    for row in rows:
        node = row.node
        if node is None:
            problems.append(f"{row.node_name} was removed from the registry")
        elif node.lost:
            problems.append(f"{node.name} is lost (no heartbeat)")
        elif node.cordoned:
            problems.append(f"{node.name} is cordoned ({node.cordon_reason or 'by staff'})")
    return problems


def stop_jobs(workspace: Workspace, reason: str) -> int:
    """Stop the workspace's jobs that wait or run (idempotent); agents stop their processes."""
    job_ids = TrainingJob.objects.filter(workspace=workspace, status__in=job_actions.STOPPABLE).values_list("pk", flat=True)
    return sum(job_actions.stop_job(job_id, reason) for job_id in job_ids)


def _finish_termination(workspace: Workspace, rows: list[WorkspaceNode], ledger: Ledger) -> bool:
    """Release the nodes and delete the workspace once none of its jobs holds a GPU."""
    stop_jobs(workspace, f"Training Workspace {workspace.name} was cancelled")
    still = Placement.objects.filter(attempt__job__workspace=workspace, state__in=HOLDING_STATES)
    if still.exists():
        set_reason(workspace, f"Waiting for {still.values('attempt__job').distinct().count()} job(s) to stop")
        return False
    _release(rows, ledger)
    archive_workspace(workspace)
    remove(workspace)
    return True


def reconcile(workspace: Workspace, ledger: Ledger | None = None) -> bool:
    """One step of one workspace towards its node count (caller holds the scheduler lock).
    True when it reserved or released a node."""
    ledger = load_ledger() if ledger is None else ledger
    rows = list(WorkspaceNode.objects.select_related("node").filter(workspace=workspace, released_at__isnull=True))
    if workspace.status == WorkspaceStatus.TERMINATING:
        return _finish_termination(workspace, rows, ledger)
    busy = _busy_jobs(ledger, (r.node_id for r in rows if r.node_id))
    # drained nodes whose jobs ended go back first
    changed = bool(_release([r for r in rows if r.draining and r.node_id not in busy], ledger))
    rows = [r for r in rows if not (r.draining and r.node_id not in busy)]
    serving = [r for r in rows if not r.draining]
    extra = len(serving) - workspace.node_count
    if extra > 0:  # a shrink asked for fewer: idle nodes go now (busy ones only by drain)
        idle = [r for r in serving if r.node_id not in busy][:extra]
        changed |= bool(_release(idle, ledger))
        serving = [r for r in serving if r not in idle]
    missing = workspace.node_count - len(serving)
    if missing > 0:
        taken = [_take(workspace, node, ledger) for node in free_nodes(workspace, ledger)[:missing]]
        serving += taken
        if taken:
            changed = True
            schedule_on_commit()  # the workspace's waiting jobs may fit now
    _settle(workspace, serving, [r for r in rows if r.draining], busy)
    return changed


def _settle(workspace: Workspace, serving: list[WorkspaceNode], draining: list[WorkspaceNode], busy: dict[int, list[str]]) -> None:
    """The status (and reason) that what the workspace holds now calls for."""
    problems = _unhealthy(serving)
    missing = workspace.node_count - len(serving)
    if problems:
        move(workspace, WorkspaceStatus.ERROR, "; ".join(problems))
    elif missing > 0:
        waiting = (
            f"Waiting for {missing} more free {workspace.server_type.name} node(s): "
            f"{len(serving)} of {workspace.node_count} reserved"
        )
        if workspace.status == WorkspaceStatus.ERROR:
            move(workspace, WorkspaceStatus.UPDATING, waiting)
        else:
            set_reason(workspace, waiting)
    elif draining:
        jobs = sorted({job for r in draining for job in busy.get(r.node_id, [])})
        names = ", ".join(r.node_name for r in draining)
        set_reason(workspace, f"Draining {names}: released when {', '.join(jobs) or 'its jobs'} end(s)")
    else:
        names = ", ".join(sorted(r.node_name for r in serving))
        move(workspace, WorkspaceStatus.DEPLOYED, f"{len(serving)} node(s) reserved: {names}")


def reconcile_all(ledger: Ledger | None = None) -> bool:
    """Every workspace one step on (caller holds the scheduler lock); True when nodes moved."""
    ledger = load_ledger() if ledger is None else ledger
    changed = False
    for workspace in Workspace.objects.select_related("server_type").order_by("created_at", "id"):
        changed |= reconcile(workspace, ledger)
    return changed


@transaction.atomic
def reconcile_now(workspace_id: int | None = None) -> None:
    """Take the scheduler lock and reconcile one workspace (or all of them)."""
    if not Workspace.objects.exists():
        return  # nothing to reserve or release: do not queue behind the scheduler for nothing
    take_scheduler_lock()
    if workspace_id is None:
        reconcile_all()
        return
    workspace = Workspace.objects.select_for_update().select_related("server_type").filter(pk=workspace_id).first()
    if workspace is not None:
        reconcile(workspace)
