"""Pages for staff only: a logged-in user without staff rights gets a 403 page that says so
(not the admin's login form, which reads as if the password were wrong)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

STAFF_ONLY = "Staff only"  # templates/403.html explains it


def staff_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        # anonymous users never get here: LoginRequiredExceptApiMiddleware sends them to /login/
        if not request.user.is_staff:
            raise PermissionDenied(STAFF_ONLY)
        return view(request, *args, **kwargs)

    return wrapped
