"""Training Job pages: list, create, detail (Details / Monitoring / Logs / Tags), tags, delete."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.db import IntegrityError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from workspaces.pricing import hourly_estimate

from . import actions
from .choices import TERMINAL_STATUSES, JobStatus, LearningType
from .filters import JobFilter
from .forms import TrainingJobForm, tags_from_post
from .models import ServerType, TrainingJob
from .recovery import goodput_load
from .storage.checkpoint_copy import CopyFailed
from .validation import DUPLICATE_NAME_MESSAGE, tags_error

TABS = {"details": "Details", "monitoring": "Monitoring", "logs": "Logs", "tags": "Tags"}


def _own_job(request: HttpRequest, pk: int) -> TrainingJob:
    """Another user's job does not exist for this user: 404, never 403."""
    return get_object_or_404(TrainingJob.objects.select_related("server_type"), pk=pk, owner=request.user)


def _list_context(request: HttpRequest) -> dict[str, Any]:
    """The filtered page of the user's jobs, for the list and for its live refreshes."""
    jobs = (
        TrainingJob.objects.filter(owner=request.user)
        .select_related("server_type")
        .prefetch_related("tags")
    )
    # the page's search box is `q` (its links keep it); the filter's name for it is `search`
    filters = {"status": request.GET.get("status", ""), "learning_type": request.GET.get("learning_type", ""),
               "q": request.GET.get("q", "").strip()}
    filterset = JobFilter({**filters, "search": filters["q"]}, queryset=jobs)
    # a wrong value says so above an empty list, as the API answers 400 for it
    jobs = filterset.qs if filterset.is_valid() else jobs.none()
    page = Paginator(jobs, settings.JOBS_PAGE_SIZE).get_page(request.GET.get("page"))
    return {
        "page": page,
        "statuses": JobStatus.choices,
        "learning_types": LearningType.choices,
        "filters": filters,
        "filter_errors": [message for messages in filterset.errors.values() for message in messages],
    }


def job_list(request: HttpRequest) -> HttpResponse:
    return render(request, "jobs/list.html", _list_context(request))


def job_list_rows(request: HttpRequest) -> HttpResponse:
    """The list's table rows alone: the page fetches them when its socket says a job came or went."""
    return render(request, "jobs/_list_rows.html", _list_context(request))


def _server_types_data(server_types: list[ServerType]) -> dict[str, Any]:
    """What the creation page's summary panel needs to price and describe a choice."""
    return {
        st.name: {
            "label": str(st),
            "on_demand": str(st.on_demand_price_per_gpu_hour),
            "spot": str(st.spot_price_per_gpu_hour),
            "allocations": [
                {"gpus": a.gpus, "name": a.name, "vcpus": a.vcpus, "memory_gb": a.memory_gb}
                for a in st.allocations()
            ],
        }
        for st in server_types
    }


def job_create(request: HttpRequest) -> HttpResponse:
    tags = tags_from_post(request.POST) if request.method == "POST" else []
    form = TrainingJobForm(request.POST or None, owner=request.user, tags=tags)
    if request.method == "POST" and form.is_valid():
        try:
            job = actions.create_job(
                request.user, form.job_fields(), tags, form.cleaned_data.get("registry_password", ""),
            )
        except IntegrityError:  # the same name submitted twice at once: the unique constraint decides
            form.add_error("name", DUPLICATE_NAME_MESSAGE)
        except CopyFailed as exc:  # nothing was created
            form.add_error("from_checkpoint", str(exc))
        else:
            messages.success(request, f"Training Job {job.name} was created.")
            return redirect(job)  # its page: where its status, logs and metrics appear
    return render(request, "jobs/create.html", {
        "form": form,
        "tags": tags,
        "server_types": form.server_types,
        "server_types_data": _server_types_data(form.server_types),
    })


def _render_detail(request: HttpRequest, job: TrainingJob, tab: str, tags: list[dict[str, str]] | None = None,
                   tag_error: str = "") -> HttpResponse:
    goodput = goodput_load.job_goodput(job)
    price = hourly_estimate(job.server_type.price_per_gpu_hour(job.learning_type), job.gpus_per_node, job.node_count)
    return render(request, "jobs/detail.html", {
        "job": job,
        "tags": list(job.tags.all()) if tags is None else tags,
        "tag_error": tag_error,
        "history": list(job.status_changes.all()),
        "attempts": list(job.attempts.prefetch_related("placements")),
        "hourly_price": price,
        "tab": tab if tab in TABS else "details",
        "tab_names": TABS.items(),
        "job_meta": job_meta(job),
        "goodput": goodput,
        "goodput_percent": f"{goodput.ratio * 100:.1f} %" if goodput.ratio is not None else "",
    })


def job_meta(job: TrainingJob) -> dict[str, Any]:
    """What the page's scripts need: an ended job's Logs and Monitoring tabs are not "Live"."""
    return {
        "id": job.pk, "status": job.status, "ended": job.status in TERMINAL_STATUSES,
        "ended_at": job.updated_at.timestamp() if job.status in TERMINAL_STATUSES else None,
        "terminal_statuses": sorted(TERMINAL_STATUSES),
        "list_url": reverse("jobs:list"),  # where "This job was deleted" points
    }


def job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    return _render_detail(request, _own_job(request, pk), request.GET.get("tab", "details"))


@require_POST
def job_tags(request: HttpRequest, pk: int) -> HttpResponse:
    job = _own_job(request, pk)
    tags = tags_from_post(request.POST)
    if error := tags_error(tags):
        # the stored tags stay as they were; the rows just typed are shown again to be corrected
        return _render_detail(request, job, "tags", tags=tags, tag_error=f"Tags not saved: {error}")
    actions.replace_tags(job, tags)
    messages.success(request, "Tags saved.")
    return redirect(f"{job.get_absolute_url()}?tab=tags")


@require_POST
def job_delete(request: HttpRequest, pk: int) -> HttpResponse:
    job = _own_job(request, pk)
    outcome = actions.delete_job(job.pk)
    if outcome == "terminating":
        messages.info(request, f"Training Job {job.name} is terminating: its processes are being stopped.")
        return redirect(job)
    messages.success(request, f"Training Job {job.name} was deleted.")
    return redirect("jobs:list")


@require_POST
def job_bulk_delete(request: HttpRequest) -> HttpResponse:
    ids = [int(i) for i in request.POST.getlist("ids") if i.isdigit()]
    # only the user's own jobs: ids of other users' jobs are silently not found
    owned = list(TrainingJob.objects.filter(owner=request.user, pk__in=ids).values_list("pk", flat=True))
    outcomes = [actions.delete_job(pk) for pk in owned]
    terminating = outcomes.count("terminating")
    if not owned:
        messages.error(request, "Select at least one Training Job to delete.")
    else:
        # "gone": deleted meanwhile by another request; it is gone all the same
        messages.success(request, bulk_delete_message(len(outcomes) - terminating, terminating))
    return redirect("jobs:list")


def bulk_delete_message(deleted: int, terminating: int) -> str:
    """What a bulk delete did, in words: jobs that held nodes are stopped first, then deleted."""
    def jobs(n: int) -> str:
        return f"{n} Training Job{'s' if n != 1 else ''}"

    parts = [f"Deleted {jobs(deleted)}."] if deleted else []
    if terminating:
        who = f"{terminating} more" if deleted else jobs(terminating)
        verb, pronoun = ("is", "its") if terminating == 1 else ("are", "their")
        parts.append(f"{who} {verb} terminating: {pronoun} processes are being stopped on {pronoun} nodes, then "
                     f"{'it is' if terminating == 1 else 'they are'} deleted.")
    return " ".join(parts)
