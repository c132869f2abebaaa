"""Quotas (workspaces.quotas) before a Slurm submission: a job over its owner's GPUs-in-use or
concurrent-jobs quota waits in the console, not in Slurm, as it would for the agents.

A job already submitted counts as running with its GPUs even while Slurm still queues it: once
submitted, Slurm may start it at any moment, and two jobs must not both slip under one limit.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from workspaces.admission import limits_for, usage_for
from workspaces.quotas import JobAsk, Limits, Usage, scheduling_block

from ..choices import WAITING_STATUSES
from ..models import TrainingJob


def _submitted_waiting(owner: Any) -> tuple[int, int]:
    """(jobs, GPUs) of the owner's jobs that Slurm holds queued (submitted, not yet running)."""
    jobs = TrainingJob.objects.filter(owner=owner, status__in=WAITING_STATUSES, slurm__slurm_job_id__isnull=False,
                                      slurm__finished_at__isnull=True, workspace__isnull=True)
    shapes = list(jobs.values_list("gpus_per_node", "node_count"))
    return len(shapes), sum(g * n for g, n in shapes)


def holds(jobs: list[TrainingJob]) -> dict[int, str]:
    """Why each of these waiting jobs (FIFO order) must not be submitted yet; absent: submit it."""
    limits: dict[int, Limits] = {}
    usage: dict[int, Usage] = {}
    held: dict[int, str] = {}
    for job in jobs:
        owner = job.owner
        if owner.pk not in limits:
            limits[owner.pk] = limits_for(owner)
        if limits[owner.pk].unlimited:
            continue
        if owner.pk not in usage:
            counted, gpus = _submitted_waiting(owner)
            current = usage_for(owner, limits[owner.pk])
            usage[owner.pk] = dataclasses.replace(current, running_jobs=current.running_jobs + counted,
                                                  gpus_in_use=current.gpus_in_use + gpus)
        ask = JobAsk(job.learning_type, job.server_type.name, job.gpus_per_node, job.node_count, bool(job.workspace_id))
        reason = scheduling_block(limits[owner.pk], usage[owner.pk], ask)
        if reason:
            held[job.pk] = reason
            continue
        current = usage[owner.pk]
        usage[owner.pk] = dataclasses.replace(current, running_jobs=current.running_jobs + 1,
                                              gpus_in_use=current.gpus_in_use + ask.gpus)
    return held
