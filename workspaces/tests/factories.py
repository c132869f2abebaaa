"""Rows the workspaces tests build on: nodes, placements that ran, workspaces."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from jobs import actions as job_actions
from jobs import lifecycle
from jobs.models import JobAttempt, Node, NodeGPU, Placement, ServerType, TrainingJob
from jobs.scheduling.decision import Assignment
from jobs.tests.factories import job_fields
from workspaces import actions


def make_node(name: str, gpus: int = 8, server_type: str = "g2", **fields) -> Node:
    node = Node.objects.create(
        name=name, server_type=ServerType.objects.get(name=server_type), address="127.0.0.1",
        connected=True, last_heartbeat_at=timezone.now(), **fields,
    )
    NodeGPU.objects.bulk_create([NodeGPU(node=node, index=i, uuid=f"{name}-{i}", model="H100", memory_gb=80) for i in range(gpus)])
    return node


def workspace_fields(**overrides) -> dict:
    fields = {"name": "team-ws", "server_type": "g2", "gpus_per_node": 8, "memory_gb": 2048, "node_count": 2, "contract_months": 3}
    fields.update(overrides)
    return fields


def make_workspace(owner, **overrides):
    return actions.create_workspace(owner, workspace_fields(**overrides))


def create_job(owner, **overrides) -> TrainingJob:
    return job_actions.create_job(owner, job_fields(**overrides), [])


def place(job: TrainingJob, *nodes: Node, gpus: int | None = None) -> JobAttempt:
    """Put the job's next attempt on these nodes (as the scheduler would)."""
    count = gpus or job.gpus_per_node
    return lifecycle.start_attempt(job.pk, [Assignment(n.pk, n.name, tuple(range(count))) for n in nodes])


def ran(attempt: JobAttempt, start: datetime, end: datetime | None, state: str = "exited") -> None:
    """Mark every placement of the attempt as having held its GPUs from `start` to `end`."""
    Placement.objects.filter(attempt=attempt).update(started_at=start, ended_at=end, state=state if end else "running")
    JobAttempt.objects.filter(pk=attempt.pk).update(running_at=start, ended_at=end)


def finish(job: TrainingJob, status: str = "Completed") -> TrainingJob:
    """Move the job through Running to a terminal status, with its placements exited now."""
    job.refresh_from_db()
    now = timezone.now()
    if job.status == "Creating":
        JobAttempt.objects.filter(job=job, number=job.current_attempt).update(running_at=now)
        job_actions.transition(job.pk, "Running", "test")
    Placement.objects.filter(attempt__job=job, ended_at__isnull=True).update(state="exited", ended_at=now, started_at=now)
    job_actions.transition(job.pk, status, "test")
    job.refresh_from_db()
    return job
