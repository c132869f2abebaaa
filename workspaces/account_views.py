"""A user's own numbers: usage and cost by month, job and plan; quotas and what they hold now."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from jobs.models import ServerType

from .admission import limits_for, usage_for
from .choices import Plan, UsageKind
from .models import ContractTerm, Quota
from .pricing import contract_rate, discount_percent, money
from .quotas import QUOTA_NAMES, Limits, Usage
from .usage import MonthSummary, summarize, user_items

CHART_MONTHS = 12


def _chart(months: list[MonthSummary]) -> dict[str, Any]:
    """Plotly traces: cost per month, stacked by plan (oldest month first)."""
    shown = list(reversed(months[:CHART_MONTHS]))
    labels = [m.month for m in shown]
    traces = []
    for plan, label in Plan.choices:
        costs = [float(money(m.by_plan[plan].amount)) if plan in m.by_plan else 0.0 for m in shown]
        hours = [round(float(m.by_plan[plan].charged_gpu_hours), 2) if plan in m.by_plan else 0.0 for m in shown]
        if any(costs) or any(hours):
            traces.append({"type": "bar", "name": label, "x": labels, "y": costs, "customdata": hours,
                           "hovertemplate": "%{x}: $%{y:,.2f} (%{customdata:,.2f} GPU-hours)<extra>" + label + "</extra>"})
    return {"traces": traces, "months": labels}


def usage(request: HttpRequest) -> HttpResponse:
    tz = timezone.get_current_timezone()
    months = summarize(user_items(request.user), tz)
    selected_key = request.GET.get("month") or (months[0].month if months else timezone.localtime().strftime("%Y-%m"))
    selected = next((m for m in months if m.month == selected_key), MonthSummary(selected_key))
    server_types = list(ServerType.objects.all())
    terms = list(ContractTerm.objects.all())
    return render(request, "workspaces/usage.html", {
        "months": months, "selected": selected, "chart": _chart(months), "plans": Plan.choices,
        "prices": [
            {"st": st, "spot_discount": discount_percent(st.on_demand_price_per_gpu_hour, st.spot_price_per_gpu_hour),
             "terms": [(t, contract_rate(st.on_demand_price_per_gpu_hour, t.discount_percent)) for t in terms]}
            for st in server_types
        ],
        "terms": terms, "job_kind": UsageKind.JOB,
    })


def _rows(limits: Limits, usage: Usage) -> list[tuple[str, str, str]]:
    def limit(value: object, unit: str = "") -> str:
        return "No limit" if value is None else f"{value}{unit}"

    budget = limits.monthly_gpu_hour_budget
    return [
        (QUOTA_NAMES["max_gpus_in_use"], limit(limits.max_gpus_in_use), f"{usage.gpus_in_use} GPUs in use"),
        (QUOTA_NAMES["max_concurrent_jobs"], limit(limits.max_concurrent_jobs), f"{usage.unfinished_jobs} not ended, {usage.running_jobs} running"),
        (QUOTA_NAMES["max_nodes_per_job"], limit(limits.max_nodes_per_job), "—"),
        (QUOTA_NAMES["allowed_server_types"], ", ".join(sorted(limits.allowed_server_types)) if limits.allowed_server_types is not None else "All", "—"),
        (QUOTA_NAMES["spot_allowed"], "Yes" if limits.spot_allowed else "No", "—"),
        (QUOTA_NAMES["workspaces_allowed"], "Yes" if limits.workspaces_allowed else "No", "—"),
        (QUOTA_NAMES["monthly_gpu_hour_budget"], limit(budget, " GPU-hours"), f"{usage.gpu_hours_this_month.quantize(Decimal('0.01'))} GPU-hours in {usage.month}"),
    ]


def quotas(request: HttpRequest) -> HttpResponse:
    own = Quota.objects.filter(user=request.user).exists()
    groups = list(Quota.objects.filter(group__user=request.user).values_list("group__name", flat=True))
    if own:
        source = "Your own quota (set by an administrator)."
    elif groups:
        source = f"The quotas of your group(s) {', '.join(sorted(groups))}: the most generous value of each applies."
    else:
        source = "No quota is set for you or your groups: no limits apply."
    limits = limits_for(request.user)
    return render(request, "workspaces/quotas.html", {"rows": _rows(limits, usage_for(request.user)), "source": source})
