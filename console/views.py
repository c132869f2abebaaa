"""Service home: what the user has, and where to start; and the favicon."""

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db.models import Count
from django.http import FileResponse, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import cache_control

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


@login_not_required  # browsers ask for it on every page, the login page and the admin included
@cache_control(max_age=86400, public=True)
def favicon(request: HttpRequest) -> FileResponse:
    return FileResponse(open(settings.BASE_DIR / "static" / "favicon.ico", "rb"), content_type="image/x-icon")
