"""Template tags that put workspace, warm-pool and billing facts on pages of other apps."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils import timezone

from jobs.models import TrainingJob

from ..choices import Plan
from ..pricing import money
from ..usage import bill_queryset, job_bill
from ..warm_data import hold_lines

register = template.Library()


@register.inclusion_tag("workspaces/_job_billing.html")
def job_billing(job: TrainingJob) -> dict[str, Any]:
    """The job page's cost so far (per attempt, with the time lost to interruptions) and how
    it started (warm or not, and why)."""
    loaded = bill_queryset().get(pk=job.pk)
    bill = job_bill(loaded, timezone.now())
    return {
        "job": job, "bill": bill, "amount": money(bill.total.amount), "credited": money(bill.total.credited),
        "plan_label": Plan(bill.plan).label, "in_workspace": bill.plan == Plan.WORKSPACE,
        "workspace_name": getattr(getattr(loaded, "billing", None), "workspace_name", ""),
        "attempts": [(a, money(a.cost.amount)) for a in bill.attempts],
        "warm_holds": hold_lines(job),
    }
