"""Login required everywhere; the API keeps DRF's own 401/403 answers."""

from django.contrib.auth.middleware import LoginRequiredMiddleware


class LoginRequiredExceptApiMiddleware(LoginRequiredMiddleware):
    """Pages redirect to the login form; `/api/` is guarded by DRF (session or token)."""

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path.startswith("/api/"):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)
