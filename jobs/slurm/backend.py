"""The scheduler's hook (jobs.scheduling.policy.Backend): Slurm-served jobs are not placed on agents;
they are submitted to their cluster by the Slurm pass (jobs.slurm.tasks.sync_slurm)."""

from __future__ import annotations

import logging

from celery import current_app
from django.db import transaction
from django.db.models import QuerySet

from .models import SlurmCluster

log = logging.getLogger(__name__)


class SlurmBackend:
    def others(self, waiting: QuerySet) -> QuerySet:
        """Jobs whose server type no Slurm cluster serves (the agents' gang scheduler places them)."""
        return waiting.filter(server_type__slurm_cluster__isnull=True)

    def notify(self, waiting: QuerySet) -> None:
        """If any waiting job belongs to a Slurm cluster, run the Slurm pass now: the jobs it submits
        are committed already, and this run never writes them (it places the agents' jobs only), so
        they need not wait for the rest of the run."""
        if waiting.filter(server_type__slurm_cluster__enabled=True).exists():
            request_pass()

    def claims(self, server_type_id: int) -> bool:
        """A job created for a cluster's server type asks for the Slurm pass itself, on commit: a
        scheduler run in between (another task hop and the scheduler's lock) only delays it."""
        if not SlurmCluster.objects.filter(server_type_id=server_type_id, enabled=True).exists():
            return False
        transaction.on_commit(request_pass)
        return True


def request_pass() -> None:
    try:  # by name (no import of the tasks); the beat tick makes up for a request the broker did not take
        current_app.send_task("jobs.slurm.tasks.sync_slurm")
    except Exception:
        log.warning("could not ask for a Slurm pass; the next tick does it", exc_info=True)

