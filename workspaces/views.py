"""Training Workspace pages: list (bulk cancel), create (summary + confirm), detail, edit, cancel."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.contrib import messages
from django.db import IntegrityError
from django.db.models import Count, Prefetch, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from jobs.choices import TERMINAL_STATUSES
from jobs.models import Placement
from jobs.models.attempts import HOLDING_STATES

from . import actions
from .forms import ResizeForm, WorkspaceForm
from .models import Workspace, WorkspaceNode
from .pricing import money, total_cost, workspace_estimate
from .reservations import free_node_counts
from .usage import workspace_spans
from .validation import DUPLICATE_NAME_MESSAGE


def _own(request: HttpRequest, pk: int) -> Workspace:
    """Another user's workspace does not exist for this user: 404, never 403."""
    return get_object_or_404(Workspace.objects.select_related("server_type"), pk=pk, owner=request.user)


def workspace_list(request: HttpRequest) -> HttpResponse:
    workspaces = (
        Workspace.objects.filter(owner=request.user).select_related("server_type")
        .annotate(reserved=Count("reservations", filter=Q(reservations__released_at__isnull=True)))
    )
    return render(request, "workspaces/list.html", {"workspaces": workspaces})


def pricing_data(form: WorkspaceForm) -> dict[str, Any]:
    """What the creation page's summary needs to describe a choice and estimate its bill."""
    return {
        "server_types": {
            st.name: {
                "label": str(st), "on_demand": str(st.on_demand_price_per_gpu_hour),
                "allocations": [{"gpus": a.gpus, "name": a.name, "vcpus": a.vcpus, "memory_gb": a.memory_gb} for a in st.allocations()],
            }
            for st in form.server_types
        },
        "terms": {str(t.months): str(t.discount_percent) for t in form.terms},
        "hours_per_month": 730,
    }


def workspace_create(request: HttpRequest) -> HttpResponse:
    form = WorkspaceForm(request.POST or None, owner=request.user)
    if request.method == "POST" and form.is_valid():
        try:
            workspace = actions.create_workspace(request.user, form.workspace_fields())
        except IntegrityError:  # the same name submitted twice at once: the unique constraint decides
            form.add_error("name", DUPLICATE_NAME_MESSAGE)
        else:
            messages.success(request, f"Training Workspace {workspace.name} was created ({workspace.status}).")
            return redirect("workspaces:list")
    return render(request, "workspaces/create.html", {
        "form": form, "pricing": pricing_data(form), "free_nodes": free_node_counts(),
    })


def _node_rows(workspace: Workspace) -> list[dict[str, Any]]:
    rows = list(workspace.reservations.filter(released_at__isnull=True).select_related("node"))
    jobs: dict[int, set[str]] = {}
    holding = Placement.objects.filter(node_id__in=[r.node_id for r in rows], state__in=HOLDING_STATES)
    for node_id, name in holding.values_list("node_id", "attempt__job__name"):
        jobs.setdefault(node_id, set()).add(name)
    return [
        {"row": r, "status": r.node.status(busy=r.node_id in jobs) if r.node else "Removed", "jobs": sorted(jobs.get(r.node_id, ()))}
        for r in rows
    ]


def workspace_detail(request: HttpRequest, pk: int) -> HttpResponse:
    workspace = get_object_or_404(
        Workspace.objects.select_related("server_type").prefetch_related(Prefetch("reservations", queryset=WorkspaceNode.objects.order_by("reserved_at"))),
        pk=pk, owner=request.user,
    )
    billed = total_cost(workspace_spans(workspace))
    return render(request, "workspaces/detail.html", {
        "workspace": workspace,
        "nodes": _node_rows(workspace),
        "jobs": workspace.jobs.select_related("server_type").order_by("-created_at")[:50],
        "active_jobs": workspace.jobs.exclude(status__in=TERMINAL_STATUSES).count(),
        "history": list(workspace.status_changes.all()),
        "estimate": workspace.estimate(),
        "billed": billed, "billed_amount": money(billed.amount),
    })


def workspace_edit(request: HttpRequest, pk: int) -> HttpResponse:
    workspace = _own(request, pk)
    form = ResizeForm(request.POST or None, initial={"node_count": workspace.node_count})
    if request.method == "POST" and form.is_valid():
        try:
            actions.resize_workspace(workspace.pk, form.cleaned_data["node_count"], form.cleaned_data["when_busy"])
        except actions.ResizeRefused as refused:
            form.add_error(None, str(refused))
        else:
            messages.success(request, f"Training Workspace {workspace.name}: number of nodes set to {form.cleaned_data['node_count']}.")
            return redirect(workspace)
    rate = Decimal(workspace.price_per_gpu_hour)
    return render(request, "workspaces/edit.html", {
        "workspace": workspace, "form": form, "nodes": _node_rows(workspace),
        "estimate_data": {"rate": str(rate), "gpus": workspace.gpus_per_node, "months": workspace.contract_months, "hours_per_month": 730},
        "estimate": workspace_estimate(rate, workspace.gpus_per_node, workspace.node_count, workspace.contract_months),
    })


def _cancelled_message(request: HttpRequest, names: list[str], outcomes: list[str]) -> None:
    terminating = outcomes.count("terminating")
    text = f"Service cancelled for {len(names)} Training Workspace(s): {', '.join(sorted(names))}."
    if terminating:
        text += f" {terminating} terminating: their jobs are stopping, then the nodes return to the shared pool."
    messages.success(request, text)


@require_POST
def workspace_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    workspace = _own(request, pk)
    outcome = actions.cancel_workspace(workspace.pk)
    _cancelled_message(request, [workspace.name], [outcome])
    return redirect(workspace) if outcome == "terminating" else redirect("workspaces:list")


@require_POST
def workspace_bulk_cancel(request: HttpRequest) -> HttpResponse:
    ids = [int(i) for i in request.POST.getlist("ids") if i.isdigit()]
    # only the user's own workspaces: ids of other users' are silently not found
    owned = list(Workspace.objects.filter(owner=request.user, pk__in=ids).values_list("pk", "name"))
    if not owned:
        messages.error(request, "Select at least one Training Workspace to cancel.")
        return redirect("workspaces:list")
    outcomes = [actions.cancel_workspace(pk) for pk, _ in owned]
    _cancelled_message(request, [name for _, name in owned], outcomes)
    return redirect("workspaces:list")
