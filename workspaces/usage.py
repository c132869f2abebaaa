"""What a user's jobs and workspaces cost: rows from the database turned into pricing Spans.

A job's spans come from its placements (Placement started_at → ended_at, or now while it
runs); a workspace's from its node reservations; deleted ones from UsageArchive. All three go
through the same arithmetic (workspaces.pricing).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from decimal import Decimal
from typing import Any

from django.db.models import Prefetch, Q, QuerySet
from django.utils import timezone

from jobs.choices import LearningType
from jobs.models import JobAttempt, Placement, TrainingJob

from .choices import Plan, UsageKind
from .models import JobBilling, UsageArchive, Workspace, WorkspaceNode
from .pricing import Cost, Span, cost_by_month, lost_tail_seconds, month_of, total_cost


def current_plan(job: TrainingJob) -> tuple[str, Decimal]:
    """The plan and price a job is billed under now (when it has no JobBilling row)."""
    if job.workspace_id:
        return Plan.WORKSPACE, Decimal(0)  # the workspace's contract covers it
    if job.learning_type == LearningType.SPOT:
        return Plan.SPOT, job.server_type.spot_price_per_gpu_hour
    return Plan.ON_DEMAND, job.server_type.on_demand_price_per_gpu_hour


def attempt_price(job: TrainingJob, attempt: JobAttempt, price: Decimal) -> Decimal:
    """An attempt's price per GPU-hour: a spot job's attempts on on-demand capacity (after its
    fallback budget ran out) at the on-demand price it fell back at, the others at the job's."""
    if attempt.on_demand and job.on_demand_price_per_gpu_hour is not None:
        return Decimal(job.on_demand_price_per_gpu_hour)
    return price


def job_price(job: TrainingJob) -> tuple[str, Decimal]:
    billing: JobBilling | None = getattr(job, "billing", None)
    if billing is not None:
        return billing.plan, Decimal(billing.price_per_gpu_hour)
    return current_plan(job)


@dataclass(frozen=True)
class AttemptBill:
    number: int
    kind: str
    spans: list[Span]
    cost: Cost
    lost_seconds: float  # the redone tail of this attempt, not charged
    waited_seconds: float  # between this attempt's end and the next one running: nothing held
    price_per_gpu_hour: Decimal = Decimal(0)  # the on-demand price for a spot job's fallback attempts
    on_demand: bool = False  # a spot job's attempt on on-demand capacity (its fallback budget ran out)


@dataclass(frozen=True)
class JobBill:
    plan: str
    price_per_gpu_hour: Decimal
    attempts: list[AttemptBill]
    total: Cost

    @property
    def spans(self) -> list[Span]:
        return [span for attempt in self.attempts for span in attempt.spans]

    def spans_by_plan(self) -> list[tuple[str, list[Span]]]:
        """The spans under the plan each was billed at: a spot job's attempts on on-demand
        capacity (its fallback budget ran out) are On-Demand usage, at the on-demand price."""
        fallback = [span for attempt in self.attempts if attempt.on_demand for span in attempt.spans]
        own = [span for attempt in self.attempts if not attempt.on_demand for span in attempt.spans]
        return [(self.plan, own)] + ([(Plan.ON_DEMAND, fallback)] if fallback else [])


def _attempt_end(placements: list[Placement], attempt: JobAttempt, now: datetime) -> datetime:
    ends = [p.ended_at or now for p in placements]
    return max(ends) if ends else (attempt.ended_at or now)


def job_bill(job: TrainingJob, now: datetime | None = None) -> JobBill:
    """Needs job.attempts (with placements) prefetched to stay at a fixed number of queries."""
    now = now or timezone.now()
    plan, price = job_price(job)
    attempts = sorted(job.attempts.all(), key=lambda a: a.number)
    bills = []
    for index, attempt in enumerate(attempts):
        placements = [p for p in attempt.placements.all() if p.started_at]
        following = attempts[index + 1] if index + 1 < len(attempts) else None
        lost = waited = 0.0
        if following is not None and following.lost_seconds:
            end = _attempt_end(placements, attempt, now)
            waited = max(0.0, ((following.running_at or now) - end).total_seconds())
        spans = []
        for p in placements:
            run = max(0.0, ((p.ended_at or now) - p.started_at).total_seconds())
            tail = lost_tail_seconds(following.lost_seconds, waited, run) if following and following.lost_seconds else 0.0
            lost = max(lost, tail)
            spans.append(Span(p.started_at, p.ended_at or now, len(p.gpu_indices), attempt_price(job, attempt, price), tail))
        bills.append(AttemptBill(attempt.number, attempt.kind, spans, total_cost(spans), lost, waited,
                                 attempt_price(job, attempt, price), attempt.on_demand))
    total = Cost()
    for bill in bills:
        total += bill.cost
    return JobBill(plan, price, bills, total)


def bill_queryset() -> QuerySet[TrainingJob]:
    """Jobs with everything job_bill reads, in a fixed number of queries."""
    return TrainingJob.objects.select_related("server_type", "billing").prefetch_related(
        Prefetch("attempts", queryset=JobAttempt.objects.prefetch_related("placements")),
    )


def workspace_spans(workspace: Workspace, now: datetime | None = None) -> list[Span]:
    """Needs workspace.reservations prefetched for lists."""
    now = now or timezone.now()
    return [
        Span(r.reserved_at, r.released_at or now, workspace.gpus_per_node, Decimal(workspace.price_per_gpu_hour))
        for r in workspace.reservations.all()
    ]


@dataclass(frozen=True)
class Item:
    """One billable thing of a user: a job, a workspace, or one that was deleted."""

    kind: str
    source_id: int
    name: str
    plan: str
    server_type: str
    spans: list[Span]
    deleted: bool = False


def user_items(owner: Any, now: datetime | None = None, since: datetime | None = None) -> list[Item]:
    """Every job and workspace of `owner` with its spans (only spans ending after `since`)."""
    now = now or timezone.now()
    items: list[Item] = []
    jobs = bill_queryset().filter(owner=owner)
    if since is not None:
        jobs = jobs.filter(Q(attempts__placements__ended_at__isnull=True) | Q(attempts__placements__ended_at__gte=since)).distinct()
    for job in jobs.filter(attempts__isnull=False).distinct():
        bill = job_bill(job, now)
        for plan, spans in bill.spans_by_plan():
            items.append(Item(UsageKind.JOB, job.pk, job.name, plan, job.server_type.name, spans))
    workspaces = Workspace.objects.filter(owner=owner).select_related("server_type").prefetch_related(
        Prefetch("reservations", queryset=WorkspaceNode.objects.order_by("reserved_at")),
    )
    for ws in workspaces:
        items.append(Item(UsageKind.WORKSPACE, ws.pk, ws.name, Plan.WORKSPACE, ws.server_type.name, workspace_spans(ws, now)))
    archived = UsageArchive.objects.filter(owner=owner)
    if since is not None:
        archived = archived.filter(ended_at__gte=since)
    grouped: dict[tuple[Any, ...], list[Span]] = defaultdict(list)
    meta: dict[tuple[Any, ...], UsageArchive] = {}
    for row in archived:
        key = (row.kind, row.source_id)
        grouped[key].append(row.span())
        meta[key] = row
    for key, spans in grouped.items():
        row = meta[key]
        items.append(Item(row.kind, row.source_id, row.name, row.plan, row.server_type, spans, deleted=True))
    return items


@dataclass
class MonthSummary:
    month: str
    by_plan: dict[str, Cost] = field(default_factory=dict)
    by_item: list[tuple[Item, Cost]] = field(default_factory=list)
    total: Cost = field(default_factory=Cost)


def summarize(items: list[Item], tz: tzinfo) -> list[MonthSummary]:
    """Months, newest first: cost by plan and by job or workspace."""
    months: dict[str, MonthSummary] = {}
    for item in items:
        for month, cost in cost_by_month(item.spans, tz).items():
            summary = months.setdefault(month, MonthSummary(month))
            summary.by_plan[item.plan] = summary.by_plan.get(item.plan, Cost()) + cost
            summary.by_item.append((item, cost))
            summary.total += cost
    for summary in months.values():
        summary.by_item.sort(key=lambda pair: (-pair[1].amount, pair[0].name))
    return [months[key] for key in sorted(months, reverse=True)]


def month_start(now: datetime, tz: tzinfo) -> datetime:
    local = now.astimezone(tz)
    return local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def gpu_hours_this_month(owner: Any, now: datetime | None = None) -> tuple[Decimal, str]:
    """Charged GPU-hours of the owner's jobs outside workspaces this calendar month (the budget)."""
    now = now or timezone.now()
    tz = timezone.get_current_timezone()
    start = month_start(now, tz)
    month = month_of(now, tz)
    hours = Decimal(0)
    for item in user_items(owner, now, since=start):
        if item.kind != UsageKind.JOB or item.plan == Plan.WORKSPACE:
            continue
        cost = cost_by_month(item.spans, tz).get(month)
        if cost is not None:
            hours += cost.charged_gpu_hours
    return hours, month


def archive_job(job: TrainingJob) -> None:
    """Copy a job's spans into the ledger before its rows are deleted."""
    found: TrainingJob | None = bill_queryset().filter(pk=job.pk).first()  # with what job_bill reads
    if found is None:
        return
    bill = job_bill(found)
    UsageArchive.objects.bulk_create([
        UsageArchive(
            owner_id=found.owner_id, kind=UsageKind.JOB, source_id=found.pk, name=found.name, plan=plan,
            server_type=found.server_type.name, gpus=span.gpus, started_at=span.start, ended_at=span.end,
            lost_seconds=span.lost_seconds, price_per_gpu_hour=span.price_per_gpu_hour,
        )
        for plan, spans in bill.spans_by_plan() for span in spans
    ])


def archive_workspace(workspace: Workspace) -> None:
    UsageArchive.objects.bulk_create([
        UsageArchive(
            owner_id=workspace.owner_id, kind=UsageKind.WORKSPACE, source_id=workspace.pk, name=workspace.name,
            plan=Plan.WORKSPACE, server_type=workspace.server_type.name, gpus=span.gpus, started_at=span.start,
            ended_at=span.end, price_per_gpu_hour=span.price_per_gpu_hour,
        )
        for span in workspace_spans(workspace)
    ])

