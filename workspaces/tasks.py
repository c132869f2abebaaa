"""Celery tasks of the workspaces app: thin wrappers around workspaces.reservations."""

from __future__ import annotations

from celery import shared_task

from . import reservations


@shared_task(acks_late=True, ignore_result=True)
def reconcile_workspaces() -> None:
    """Reserve free nodes for workspaces that wait, release drained ones, finish cancellations;
    idempotent (level-triggered), so beat may run it every tick."""
    reservations.reconcile_now()
