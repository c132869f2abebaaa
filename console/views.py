"""Service home: what the user has, and where to start."""

from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from jobs.models import ServerType, TrainingJob


def home(request: HttpRequest) -> HttpResponse:
    counts = dict(
        TrainingJob.objects.filter(owner=request.user).values_list("status").annotate(n=Count("id"))
    )
    recent = TrainingJob.objects.filter(owner=request.user).select_related("server_type")[:5]
    return render(request, "home.html", {
        "counts": counts,
        "total": sum(counts.values()),
        "recent": recent,
        "server_types": ServerType.objects.all(),
    })
