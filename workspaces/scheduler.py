"""What Training Workspaces, the warm pool and quotas add to the scheduler's run.

jobs.tasks.schedule_jobs calls `prepare` with the waiting jobs (under its lock), passes each
job's request through `plan.shape`, leaves the jobs in `plan.held` waiting with their quota
reason, and tells `plan.placed` about each placement. In that order:

1. workspaces take the free nodes they wait for (before shared-pool jobs can);
2. a job in a workspace may use only its workspace's nodes (not draining ones);
3. any other job may use no reserved node and no node held warm for another user;
4. a job prefers nodes warm for it (same user, server type, image and script);
5. a new job that would exceed its owner's GPUs-in-use (or another) quota keeps waiting.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from jobs.choices import JobStatus
from jobs.models import JobAttempt, Node, TrainingJob
from jobs.scheduling import Assignment, JobRequest

from .admission import limits_for, usage_for
from .choices import WorkspaceStatus
from .models import WarmStart, Workspace, WorkspaceNode
from .quotas import JobAsk, Limits, Usage, scheduling_block
from .reservations import active_reservations, keep_alive_window, reconcile_all, warm_entries
from .warm_pool import JobConfig, WarmEntry, held_for, held_for_others, outcome, warm_nodes

NOTE_LOOKBACK = timedelta(days=1)  # how far back "why not warm" looks for the owner's jobs


def config(job: TrainingJob) -> JobConfig:
    return JobConfig(job.pk, job.owner_id, job.server_type.name, job.image_url, job.script_url, job.node_count)


@dataclass
class Plan:
    jobs: dict[int, TrainingJob]
    now: datetime
    reserved: dict[int, WorkspaceNode]  # node id → its reservation
    serving: dict[int, frozenset[int]]  # workspace id → nodes its jobs may use
    entries: list[WarmEntry]
    held: dict[int, str] = field(default_factory=dict)  # job id → why it keeps waiting

    def shape(self, request: JobRequest) -> JobRequest:
        """The request with the nodes this job may use and the ones it should prefer."""
        job = self.jobs.get(request.job_id)
        if job is None:
            return request
        preferred = frozenset(warm_nodes(self.entries, config(job), self.now))
        if job.workspace_id:
            allowed = self.serving.get(job.workspace_id, frozenset())
            if request.allowed_nodes is not None:
                allowed &= request.allowed_nodes
            return dataclasses.replace(request, allowed_nodes=allowed, preferred_nodes=preferred & allowed)
        excluded = (
            request.excluded_nodes | frozenset(self.reserved)
            | held_for_others(held_for(self.entries, self.now), job.owner_id)
        )
        return dataclasses.replace(request, excluded_nodes=excluded, preferred_nodes=preferred - excluded)

    def placed(self, job_id: int, assignments: list[Assignment]) -> None:
        """Record which placements start warm, and on the job whether it did and why (not)."""
        job = self.jobs.get(job_id)
        attempt = JobAttempt.objects.filter(job_id=job_id).order_by("-number").first()
        if job is None or attempt is None or attempt.number != job.current_attempt + 1:
            return  # start_attempt did not place it (deleted or moved on meanwhile)
        assigned = [a.node_id for a in assignments]
        recent = warm_entries(NOTE_LOOKBACK, owners=[job.owner_id])
        result = outcome(config(job), assigned, recent, self.now, self._why_taken(job, recent))
        placements = {p.node_id: p for p in attempt.placements.all()}
        WarmStart.objects.bulk_create([
            WarmStart(placement=placements[node_id], source_job_id=entry.job_id, source_job_name=entry.job_name)
            for node_id, entry in result.reuse.items() if node_id in placements
        ])
        if job.started_warm is None:  # the job page tells how the job first started
            TrainingJob.objects.filter(pk=job_id).update(started_warm=result.started_warm, warm_note=result.note[:300])

    def _why_taken(self, job: TrainingJob, recent: list[WarmEntry]) -> dict[int, str]:
        nodes = {e.node_id for e in recent}
        usable = set(Node.objects.filter(pk__in=nodes, connected=True, lost=False, cordoned=False).values_list("pk", flat=True))
        why = {}
        for node_id in nodes:
            if node_id not in usable:
                why[node_id] = "offline or cordoned"
            elif job.workspace_id and node_id not in self.serving.get(job.workspace_id, frozenset()):
                why[node_id] = "outside the job's Training Workspace"
            elif not job.workspace_id and node_id in self.reserved:
                why[node_id] = "reserved by a Training Workspace"
            else:
                why[node_id] = "busy (not enough free GPUs)"
        return why


def _serving_nodes(reserved: dict[int, WorkspaceNode]) -> dict[int, frozenset[int]]:
    serving: dict[int, set[int]] = {}
    for node_id, row in reserved.items():
        if not row.draining:
            serving.setdefault(row.workspace_id, set()).add(node_id)
    return {ws: frozenset(nodes) for ws, nodes in serving.items()}


def _quota_holds(jobs: list[TrainingJob]) -> dict[int, str]:
    """Jobs placed for the first time that their owner's quota keeps waiting, in FIFO order:
    a job admitted earlier in this run counts for the ones behind it."""
    limits: dict[int, Limits] = {}
    usage: dict[int, Usage] = {}
    held: dict[int, str] = {}
    for job in jobs:
        if job.status != JobStatus.PENDING:
            continue  # a failover or a spot resume was admitted when it first started
        owner = job.owner
        if owner.pk not in limits:
            limits[owner.pk] = limits_for(owner)
        if limits[owner.pk].unlimited:
            continue
        if owner.pk not in usage:
            usage[owner.pk] = usage_for(owner, limits[owner.pk])
        ask = JobAsk(job.learning_type, job.server_type.name, job.gpus_per_node, job.node_count, bool(job.workspace_id))
        reason = scheduling_block(limits[owner.pk], usage[owner.pk], ask)
        if reason:
            held[job.pk] = reason
            continue
        current = usage[owner.pk]
        usage[owner.pk] = dataclasses.replace(
            current, running_jobs=current.running_jobs + 1,
            gpus_in_use=current.gpus_in_use + (0 if ask.in_workspace else ask.gpus),
        )
    return held


def _workspace_holds(jobs: list[TrainingJob], serving: dict[int, frozenset[int]]) -> dict[int, str]:
    held = {}
    ids = {job.workspace_id for job in jobs if job.workspace_id}
    states = dict(Workspace.objects.filter(pk__in=ids).values_list("pk", "status"))
    for job in jobs:
        if not job.workspace_id:
            continue
        if states.get(job.workspace_id) == WorkspaceStatus.TERMINATING:
            held[job.pk] = f"Training Workspace {job.workspace.name} is being cancelled"  # reconcile stops the job
        elif not serving.get(job.workspace_id):
            held[job.pk] = f"Waiting for Training Workspace {job.workspace.name} to reserve its nodes ({states.get(job.workspace_id)})"
    return held


def prepare(waiting: list[TrainingJob]) -> Plan:
    """Everything the scheduler's run needs from workspaces; call it under the scheduler lock."""
    reconcile_all()
    reserved = active_reservations()
    serving = _serving_nodes(reserved)
    plan = Plan(
        jobs={job.pk: job for job in waiting}, now=timezone.now(), reserved=reserved, serving=serving,
        entries=warm_entries(keep_alive_window()),
    )
    plan.held.update(_workspace_holds(waiting, serving))
    plan.held.update(_quota_holds([job for job in waiting if job.pk not in plan.held]))
    return plan
