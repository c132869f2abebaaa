"""The scheduler's hook: Slurm-served jobs are not placed on agents; they are submitted to their cluster."""

from __future__ import annotations

from django.db import transaction
from django.db.models import QuerySet


def served_by_agents(jobs: QuerySet) -> QuerySet:
    """Jobs whose server type no Slurm cluster serves (the agents' gang scheduler places them)."""
    return jobs.filter(server_type__slurm_cluster__isnull=True)


def submit_on_commit(waiting: QuerySet) -> None:
    """If any waiting job belongs to a Slurm cluster, run the Slurm pass once this transaction commits."""
    if waiting.filter(server_type__slurm_cluster__enabled=True).exists():
        from .tasks import sync_slurm

        transaction.on_commit(lambda: sync_slurm.delay())
