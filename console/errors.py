"""Error answers: under /api/ a URL that matches no route gets DRF's JSON shape, not a page."""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        # e.g. /api/v1/nodes/1.5/: the router's id pattern refuses it before any view runs
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)
