"""The billing ledger follows the jobs app without the jobs app calling it.

Jobs are created and deleted by jobs.actions (and deleted in cascades); listening to those
two moments here keeps billing out of the job lifecycle:
- created: the job's plan and price are fixed (JobBilling), so a later price change by staff
  does not alter what a job already ran;
- about to be deleted: its spans are copied into UsageArchive, so deleting a finished job
  does not erase it from the month's bill.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models.signals import post_save, pre_delete
from django.dispatch import receiver

from jobs.models import TrainingJob

from .models import JobBilling
from .usage import archive_job, current_plan


@receiver(post_save, sender=TrainingJob, dispatch_uid="workspaces.job_billing")
def fix_job_price(sender: object, instance: TrainingJob, created: bool, raw: bool = False, **kwargs: object) -> None:
    if not created or raw:
        return
    plan, price = current_plan(instance)
    workspace_name = instance.workspace.name if instance.workspace_id else ""
    JobBilling.objects.create(job=instance, plan=plan, price_per_gpu_hour=price, workspace_name=workspace_name)


@receiver(pre_delete, sender=TrainingJob, dispatch_uid="workspaces.job_archive")
def archive_deleted_job(sender: object, instance: TrainingJob, origin: object = None, **kwargs: object) -> None:
    # a user deleted by staff takes their ledger with them: archiving would point at no one
    if isinstance(origin, get_user_model()):
        return
    archive_job(instance)
