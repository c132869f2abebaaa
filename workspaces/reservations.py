"""Node reservations of Training Workspaces: take free nodes, release idle ones, drain busy ones.

Level-triggered like the scheduler: `reconcile_all` compares what each workspace should hold
with what it holds and moves one step towards it; running it twice changes nothing. It runs
under the scheduler's lock (jobs.tasks.SCHEDULER_LOCK_ID): a node must not be reserved by a
workspace in the same moment the scheduler gives it to a shared-pool job, and a node must not
be released while the scheduler places a workspace job on it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from jobs import actions as job_actions
from jobs.choices import ACTIVE_STATUSES, TERMINAL_STATUSES, JobStatus
from jobs.models import Node, NodeGPU, Placement, TrainingJob
from jobs.models.attempts import HOLDING_STATES, PlacementState
from jobs.notify import schedule_on_commit, sync_nodes_on_commit

from . import actions
from .choices import WorkspaceStatus
from .models import Workspace, WorkspaceNode
from .usage import archive_workspace
from .warm_pool import WarmEntry, held_for, newest

log = logging.getLogger(__name__)

# jobs of a cancelled workspace that are still waiting or running are stopped
STOPPABLE = frozenset(JobStatus) - TERMINAL_STATUSES - {JobStatus.TERMINATING}


def take_scheduler_lock() -> None:
    """The scheduler's transaction-scoped lock (SQLite serialises writers by itself)."""
    from jobs.tasks import SCHEDULER_LOCK_ID  # here: jobs.tasks imports this module's callers

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SCHEDULER_LOCK_ID])


def warm_entries(since: timedelta, owners: Iterable[int] | None = None) -> list[WarmEntry]:
    """Environments kept on nodes after a job of their owner ended (newest per node and key)."""
    now = timezone.now()
    rows = Placement.objects.filter(
        ended_at__gte=now - since, node__isnull=False, state=PlacementState.EXITED,
        attempt__job__status__in=TERMINAL_STATUSES,
    ).filter(
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


def keep_alive_window() -> timedelta:
    return timedelta(minutes=settings.WARM_POOL_MAX_KEEP_ALIVE_MINUTES)


def active_reservations() -> dict[int, WorkspaceNode]:
    """Node id → the reservation holding it now."""
    rows = WorkspaceNode.objects.filter(released_at__isnull=True, node__isnull=False)
    return {r.node_id: r for r in rows}


def _busy_nodes(node_ids: Iterable[int]) -> dict[int, list[str]]:
    """Node id → names of the jobs holding GPUs on it."""
    busy: dict[int, list[str]] = {}
    rows = Placement.objects.filter(node_id__in=list(node_ids), state__in=HOLDING_STATES).values_list("node_id", "attempt__job__name")
    for node_id, job_name in rows:
        busy.setdefault(node_id, []).append(job_name)
    return busy


def idle_nodes(owner_id: int, reserved: dict[int, WorkspaceNode], server_type=None) -> list[Node]:
    """Healthy shared-pool nodes that run nothing and are not held warm for another user than
    `owner_id` (that user's own warm nodes may be taken), by name."""
    candidates = Node.objects.filter(connected=True, lost=False, cordoned=False).exclude(pk__in=list(reserved))
    if server_type is not None:
        candidates = candidates.filter(server_type=server_type)
    candidates = list(candidates.select_related("server_type").order_by("name"))
    busy = _busy_nodes(n.pk for n in candidates)
    held = held_for(warm_entries(keep_alive_window()), timezone.now())
    return [n for n in candidates if n.pk not in busy and not (held.get(n.pk, set()) - {owner_id})]


def _healthy_gpus(nodes: list[Node]) -> dict[int, int]:
    healthy: dict[int, int] = {}
    for node_id in NodeGPU.objects.filter(node__in=nodes, healthy=True).values_list("node_id", flat=True):
        healthy[node_id] = healthy.get(node_id, 0) + 1
    return healthy


def free_nodes(workspace: Workspace, reserved: dict[int, WorkspaceNode]) -> list[Node]:
    """Nodes the workspace may take now: idle, and with enough healthy GPUs for its allocation."""
    nodes = idle_nodes(workspace.owner_id, reserved, workspace.server_type)
    healthy = _healthy_gpus(nodes)
    return [n for n in nodes if healthy.get(n.pk, 0) >= workspace.gpus_per_node]


def free_node_counts(owner_id: int) -> dict[str, int]:
    """Server type name → how many whole nodes a new workspace of `owner_id` could take now."""
    nodes = idle_nodes(owner_id, active_reservations())
    healthy = _healthy_gpus(nodes)
    counts: dict[str, int] = {}
    for node in nodes:
        if healthy.get(node.pk, 0) >= node.server_type.gpus_per_node:
            counts[node.server_type.name] = counts.get(node.server_type.name, 0) + 1
    return counts


def _release(rows: Iterable[WorkspaceNode]) -> list[str]:
    now, names = timezone.now(), []
    for row in rows:
        row.released_at, row.draining = now, False
        row.save(update_fields=["released_at", "draining"])
        names.append(row.node_name)
    if names:
        schedule_on_commit()  # the nodes are back in the shared pool
    return names


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
    stopped = 0
    for job in TrainingJob.objects.select_for_update().filter(workspace=workspace, status__in=STOPPABLE):
        active = job.status in ACTIVE_STATUSES
        job_actions.transition(job.pk, JobStatus.STOPPED, reason)
        if active:
            sync_nodes_on_commit(Placement.objects.filter(attempt__job=job, state__in=HOLDING_STATES).values_list("node_id", flat=True))
        stopped += 1
    return stopped


def _finish_termination(workspace: Workspace, rows: list[WorkspaceNode]) -> bool:
    """Release the nodes and delete the workspace once none of its jobs holds a GPU."""
    stop_jobs(workspace, f"Training Workspace {workspace.name} was cancelled")
    still = Placement.objects.filter(attempt__job__workspace=workspace, state__in=HOLDING_STATES)
    if still.exists():
        actions.set_reason(workspace, f"Waiting for {still.values('attempt__job').distinct().count()} job(s) to stop")
        return False
    _release(rows)
    archive_workspace(workspace)
    actions.remove(workspace)
    return True


def reconcile(workspace: Workspace, reserved: dict[int, WorkspaceNode] | None = None) -> None:
    """One step of one workspace towards its node count (caller holds the scheduler lock)."""
    reserved = active_reservations() if reserved is None else reserved
    rows = [r for r in WorkspaceNode.objects.select_related("node").filter(workspace=workspace, released_at__isnull=True)]
    if workspace.status == WorkspaceStatus.TERMINATING:
        _finish_termination(workspace, rows)
        return
    busy = _busy_nodes(r.node_id for r in rows if r.node_id)
    # drained nodes whose jobs ended go back first
    _release([r for r in rows if r.draining and r.node_id not in busy])
    rows = [r for r in rows if not (r.draining and r.node_id not in busy)]
    serving = [r for r in rows if not r.draining]
    extra = len(serving) - workspace.node_count
    if extra > 0:  # a shrink asked for fewer: idle nodes go now (busy ones only by drain)
        idle = [r for r in serving if r.node_id not in busy][:extra]
        _release(idle)
        serving = [r for r in serving if r not in idle]
    missing = workspace.node_count - len(serving)
    if missing > 0:
        taken = free_nodes(workspace, reserved)[:missing]
        now = timezone.now()
        for node in taken:
            row = WorkspaceNode.objects.create(workspace=workspace, node=node, node_name=node.name, reserved_at=now)
            reserved[node.pk] = row
            serving.append(row)
        if taken:
            schedule_on_commit()  # the workspace's waiting jobs may fit now
    _settle(workspace, serving, [r for r in rows if r.draining], busy)


def _settle(workspace: Workspace, serving: list[WorkspaceNode], draining: list[WorkspaceNode], busy: dict[int, list[str]]) -> None:
    """The status (and reason) that what the workspace holds now calls for."""
    problems = _unhealthy(serving)
    missing = workspace.node_count - len(serving)
    if problems:
        actions.move(workspace, WorkspaceStatus.ERROR, "; ".join(problems))
    elif missing > 0:
        waiting = (
            f"Waiting for {missing} more free {workspace.server_type.name} node(s): "
            f"{len(serving)} of {workspace.node_count} reserved"
        )
        if workspace.status == WorkspaceStatus.ERROR:
            actions.move(workspace, WorkspaceStatus.UPDATING, waiting)
        else:
            actions.set_reason(workspace, waiting)
    elif draining:
        jobs = sorted({job for r in draining for job in busy.get(r.node_id, [])})
        names = ", ".join(r.node_name for r in draining)
        actions.set_reason(workspace, f"Draining {names}: released when {', '.join(jobs) or 'its jobs'} end(s)")
    else:
        names = ", ".join(sorted(r.node_name for r in serving))
        actions.move(workspace, WorkspaceStatus.DEPLOYED, f"{len(serving)} node(s) reserved: {names}")


def reconcile_all() -> None:
    """Every workspace one step on (caller holds the scheduler lock)."""
    reserved = active_reservations()
    for workspace in Workspace.objects.select_related("server_type").order_by("created_at", "id"):
        reconcile(workspace, reserved)


@transaction.atomic
def reconcile_now(workspace_id: int | None = None) -> None:
    """Take the scheduler lock and reconcile one workspace (or all of them)."""
    take_scheduler_lock()
    if workspace_id is None:
        reconcile_all()
        return
    workspace = Workspace.objects.select_for_update().select_related("server_type").filter(pk=workspace_id).first()
    if workspace is not None:
        reconcile(workspace)
