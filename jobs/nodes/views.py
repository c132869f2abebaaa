"""Node pages for staff: every node with its GPUs, health and what runs there."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from console.lib.permissions import staff_only
from nodeagent.protocol import FAULT_KINDS

from .. import actions
from ..models import Node, Placement
from ..models.attempts import HOLDING_STATES
from ..scheduling.capacity_load import load_ledger
from . import hardware


@staff_only
def node_list(request: HttpRequest) -> HttpResponse:
    ledger = load_ledger()
    rows = [
        (node, node.status(busy=node.pk in ledger.nodes and ledger.node(node.pk).busy))
        for node in Node.objects.select_related("server_type").prefetch_related("gpus")
    ]
    return render(request, "jobs/node_list.html", {"rows": rows})


@staff_only
def node_detail(request: HttpRequest, pk: int) -> HttpResponse:
    node = get_object_or_404(Node.objects.select_related("server_type"), pk=pk)
    running = (
        Placement.objects.filter(node=node, state__in=HOLDING_STATES)
        .select_related("attempt__job__owner")
    )
    recent = Placement.objects.filter(node=node).select_related("attempt__job").order_by("-id")[:20]
    ledger = load_ledger().node(node.pk)
    gpus = [(gpu, ledger.gpus.get(gpu.index)) for gpu in node.gpus.all()]
    return render(request, "jobs/node_detail.html", {
        "node": node, "status": node.status(busy=ledger.busy), "gpus": gpus,
        "running": running, "recent": recent,
        "hardware_events": node.hardware_events.all()[:50], "fault_kinds": FAULT_KINDS,
    })


@staff_only
@require_POST
def node_cordon(request: HttpRequest, pk: int) -> HttpResponse:
    node = get_object_or_404(Node, pk=pk)
    cordon = request.POST.get("action") == "cordon"
    actions.set_cordon(node.pk, cordon, request.POST.get("reason", "").strip() or f"Cordoned by {request.user.username}")
    return redirect("nodes:detail", pk=node.pk)


@staff_only
@require_POST
def node_inject_fault(request: HttpRequest, pk: int) -> HttpResponse:
    """The node page's fault injection form (simulated GPUs)."""
    node = get_object_or_404(Node, pk=pk)
    gpu = request.POST.get("gpu_index", "")
    xid = request.POST.get("xid", "")
    try:
        hardware.inject_fault(node.pk, request.POST.get("kind", ""), int(gpu) if gpu.isdigit() else None,
                           int(xid) if xid.isdigit() else None, "injected from the node page")
        messages.success(request, f"Fault sent to {node.name}.")
    except ValueError as exc:
        messages.error(request, f"Fault not sent: {exc}")
    return redirect("nodes:detail", pk=node.pk)


@staff_only
@require_POST
def node_reclaim(request: HttpRequest, pk: int) -> HttpResponse:
    node = get_object_or_404(Node, pk=pk)
    count = hardware.reclaim_from_spot(node.pk, f"node {node.name} reclaimed by {request.user.username}")
    messages.success(request, f"{count} spot job(s) interrupted; {node.name} is cordoned.")
    return redirect("nodes:detail", pk=node.pk)
