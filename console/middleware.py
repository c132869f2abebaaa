"""Login required everywhere; the API keeps DRF's own 401/403 answers."""

from collections.abc import Callable
from typing import Any

from django.contrib.auth.middleware import LoginRequiredMiddleware
from django.http import HttpRequest
from django.http.response import HttpResponseBase


class LoginRequiredExceptApiMiddleware(LoginRequiredMiddleware):
    """Pages redirect to the login form; `/api/` is guarded by DRF (session or token)."""

    def process_view(self, request: HttpRequest, view_func: Callable[..., HttpResponseBase], view_args: Any,
                     view_kwargs: Any) -> HttpResponseBase | None:
        if request.path.startswith("/api/"):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)
