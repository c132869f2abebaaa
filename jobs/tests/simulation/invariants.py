"""What must hold on a shared cluster after every step (checked by the simulation test).

Written independently of jobs.scheduling.placement: feasibility is recounted from the ledger by hand,
so a scheduler bug cannot hide behind its own arithmetic.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from jobs.choices import TERMINAL_STATUSES, JobStatus, LearningType
from jobs.models import JobAttempt, TrainingJob
from jobs.scheduling.capacity import GpuUse, JobHold, Ledger
from jobs.scheduling.capacity_load import load_ledger
from jobs.scheduling.decision import Decision
from workspaces.choices import WorkspaceStatus
from workspaces.models import Workspace
from workspaces.quotas import Limits
from workspaces.scheduling_policy import limits_by_owner

RUNNABLE = (JobStatus.CREATING, JobStatus.RUNNING)
WAITING = (JobStatus.PENDING, JobStatus.SPOT_INTERRUPTED, JobStatus.FAILOVER_IN_PROGRESS)


@dataclass
class Snapshot:
    ledger: Ledger
    jobs: dict[int, TrainingJob]
    limits: dict[int, Limits]


def snapshot() -> Snapshot:
    jobs = {j.pk: j for j in TrainingJob.objects.select_related("server_type")}
    return Snapshot(load_ledger(), jobs, limits_by_owner({j.owner_id for j in jobs.values()}))


def _job_holds(ledger: Ledger) -> list[tuple[int, int, JobHold, GpuUse]]:
    return [
        (node_id, index, state.hold, state.use)
        for node_id, node in ledger.nodes.items()
        for index, state in node.gpus.items()
        if state.use in (GpuUse.JOB, GpuUse.STOPPING) and isinstance(state.hold, JobHold)
    ]


def check_always(snap: Snapshot) -> None:
    """Safety after any step."""
    ledger, jobs = snap.ledger, snap.jobs
    assert ledger.conflicts == [], f"GPUs held twice: {ledger.conflicts}"
    for node_id, index, hold, use in _job_holds(ledger):
        job = jobs.get(hold.job_id)
        assert job is not None, f"GPU {node_id}:{index} held by deleted job {hold.job_id}"
        if use is GpuUse.JOB:
            # a GPU held without a stop requested belongs to a job that should be running
            assert job.status in RUNNABLE, f"GPU {node_id}:{index} held by {job.name} in {job.status}"
        node = ledger.nodes[node_id]
        if node.reservation is not None and use is GpuUse.JOB:
            assert hold.workspace_id == node.reservation.workspace_id, (
                f"job {job.name} runs on {node.node.name}, reserved by workspace {node.reservation.workspace_name}"
            )
        if hold.workspace_id is not None and use is GpuUse.JOB:
            assert node.reservation is not None and node.reservation.workspace_id == hold.workspace_id, (
                f"workspace job {job.name} runs outside its workspace on {node.node.name}"
            )
    for job in jobs.values():
        if job.status in TERMINAL_STATUSES:
            assert all(use is not GpuUse.JOB for _, _, h, use in _job_holds(ledger) if h.job_id == job.pk)
    # no quota exceeded (jobs in a workspace do not count for GPUs in use)
    gpus: Counter[int] = Counter(h.owner_id for _, _, h, _ in _job_holds(ledger) if h.workspace_id is None)
    running: Counter[int] = Counter(j.owner_id for j in jobs.values() if j.status in RUNNABLE)
    for owner, limits in snap.limits.items():
        if limits.max_gpus_in_use is not None:
            assert gpus[owner] <= limits.max_gpus_in_use, f"user {owner} holds {gpus[owner]} GPUs > {limits.max_gpus_in_use}"
        if limits.max_concurrent_jobs is not None:
            assert running[owner] <= limits.max_concurrent_jobs, f"user {owner} runs {running[owner]} jobs"


def _priority(job: TrainingJob) -> tuple:
    return (0 if job.status == JobStatus.FAILOVER_IN_PROGRESS else 1, job.learning_type == LearningType.SPOT, job.created_at, job.pk)


def _usable_nodes(snap: Snapshot, job: TrainingJob) -> list[int]:
    nodes = []
    for node_id, node in snap.ledger.nodes.items():
        if node.node.server_type != job.server_type.name or not node.schedulable:
            continue
        r = node.reservation
        if job.workspace_id is None and r is not None:
            continue
        if job.workspace_id is not None and (r is None or r.workspace_id != job.workspace_id or r.draining):
            continue
        nodes.append(node_id)
    return nodes


def _quota_blocks(snap: Snapshot, job: TrainingJob, extra_gpus: Counter[int], extra_jobs: Counter[int]) -> bool:
    limits = snap.limits.get(job.owner_id)
    if limits is None or limits.unlimited:
        return False
    held = sum(1 for _, _, h, _ in _job_holds(snap.ledger) if h.owner_id == job.owner_id and h.workspace_id is None)
    running = sum(1 for j in snap.jobs.values() if j.owner_id == job.owner_id and j.status in RUNNABLE)
    gpus = 0 if job.workspace_id else job.total_gpus
    if limits.max_gpus_in_use is not None and held + extra_gpus[job.owner_id] + gpus > limits.max_gpus_in_use:
        return True
    if limits.max_concurrent_jobs is not None and running + extra_jobs[job.owner_id] + 1 > limits.max_concurrent_jobs:
        return True
    return bool(limits.max_nodes_per_job is not None and job.node_count > limits.max_nodes_per_job)


def check_after_scheduling(snap: Snapshot, decision: Decision) -> None:
    """Right after a scheduler run: work-conserving, on-demand before spot, true reasons."""
    ledger = snap.ledger
    terminating_ws = set(Workspace.objects.filter(status=WorkspaceStatus.TERMINATING).values_list("pk", flat=True))
    assessing = set(
        JobAttempt.objects.filter(job__status=JobStatus.FAILOVER_IN_PROGRESS, ended_at__isnull=True).values_list("job_id", flat=True)
    )
    waiting = sorted((j for j in snap.jobs.values() if j.status in WAITING), key=_priority)
    claimed_before: dict[int, set[int]] = {}  # node → GPUs promised to jobs ahead
    extra_gpus: Counter[int] = Counter()
    extra_jobs: Counter[int] = Counter()
    for job in waiting:
        claim = decision.claimed.get(job.pk)
        if claim is not None:
            for node_id, gpus in claim.items():
                claimed_before.setdefault(node_id, set()).update(gpus)
            extra_gpus[job.owner_id] += 0 if job.workspace_id else job.total_gpus
            extra_jobs[job.owner_id] += 1
            continue
        if ledger.job_gpus(job.pk) or job.pk in assessing or job.workspace_id in terminating_ws:
            continue  # its previous attempt still stops, or its failover is being assessed
        if _quota_blocks(snap, job, extra_gpus, extra_jobs):
            continue
        usable = _usable_nodes(snap, job)
        ready = {
            n: {i for i, s in ledger.nodes[n].gpus.items() if s.use in (GpuUse.FREE, GpuUse.WARM)} - claimed_before.get(n, set())
            for n in usable
        }
        fitting = [n for n, gpus in ready.items() if len(gpus) >= job.gpus_per_node]
        assert len(fitting) < job.node_count, (
            f"{job.name} ({job.node_count}×{job.gpus_per_node}) waits although {len(fitting)} nodes fit now: {job.status_reason}"
        )
        assert job.status == JobStatus.FAILOVER_IN_PROGRESS or job.status_reason.startswith("Waiting"), job.status_reason
        if job.learning_type == LearningType.SPOT:
            continue
        # on-demand never waits for GPUs that running spot jobs hold: it would have claimed them
        with_spot = {
            n: ready[n] | {
                i for i, s in ledger.nodes[n].gpus.items()
                if isinstance(s.hold, JobHold) and (s.hold.spot or s.use is GpuUse.STOPPING)
            } - claimed_before.get(n, set())
            for n in usable
        }
        fitting = [n for n, gpus in with_spot.items() if len(gpus) >= job.gpus_per_node]
        assert len(fitting) < job.node_count, f"on-demand {job.name} waits for GPUs spot jobs hold: {job.status_reason}"
