"""The account page (/account/): the user's storage space, its keys, their rotation, and uploads.

Only ever the signed-in user's own space. The secret is not in the page: a click fetches it
from the API (GET /api/v1/account/storage/) and fills it in, examples included. Uploads go
through the console into the user's bucket under uploads/, with the user's own keys.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from . import iam
from .spaces import ensure_space, rotate_keys
from .uploads import upload_key

NO_STORAGE = "This console has no object storage (S3_ENDPOINT_URL): there is no storage space to show."
UNAVAILABLE = "Object storage did not answer; try again in a moment."


def account(request: HttpRequest) -> HttpResponse:
    context: dict[str, Any] = {"endpoint": settings.S3_ENDPOINT_URL, "space": None, "problem": "",
                               "max_mb": settings.STORAGE_UPLOAD_MAX_MB}
    if not settings.S3_ENDPOINT_URL:
        context["problem"] = NO_STORAGE
    else:
        try:
            context["space"] = ensure_space(request.user.pk)  # made on the first visit
        except iam.StorageUnavailable:
            context["problem"] = UNAVAILABLE
    return render(request, "account/account.html", context)


@require_POST
def rotate(request: HttpRequest) -> HttpResponse:
    if not settings.S3_ENDPOINT_URL:
        messages.error(request, NO_STORAGE)
    else:
        try:
            space = rotate_keys(request.user)
            messages.success(request, f"New keys issued (access key {space.access_key}); the old ones no longer work. "
                                      "Update your tools with the new secret key.")
        except iam.StorageUnavailable:
            messages.error(request, UNAVAILABLE + " Your keys are unchanged unless this page now shows a new access key.")
    return redirect("account")


@require_POST
def upload(request: HttpRequest) -> HttpResponse:
    """One file into uploads/ of the user's bucket. A script's XMLHttpRequest (the progress bar)
    gets JSON, {url} or {error}; a plain form post, the page again with a message."""
    wants_json = "application/json" in request.headers.get("Accept", "")
    url, error, status = _store(request)
    if wants_json:
        return JsonResponse({"url": url} if url else {"error": error}, status=status)
    if url:
        messages.success(request, f"Uploaded {url}: use it as the training script URL of a job.")
    else:
        messages.error(request, error)
    return redirect("account")


def _store(request: HttpRequest) -> tuple[str, str, int]:
    limit = settings.STORAGE_UPLOAD_MAX_MB * 1024 * 1024
    # refused before the body is read: a 10 GB post is not spooled to the console's disk first
    if int(request.META.get("CONTENT_LENGTH") or 0) > limit + 64 * 1024:
        return "", f"The file is larger than {settings.STORAGE_UPLOAD_MAX_MB} MB, the most one upload may carry.", 413
    if not settings.S3_ENDPOINT_URL:
        return "", NO_STORAGE, 404
    file = request.FILES.get("file")
    if file is None:
        return "", "Choose a file to upload.", 400
    if file.size > limit:
        return "", f"The file is larger than {settings.STORAGE_UPLOAD_MAX_MB} MB, the most one upload may carry.", 413
    key, why = upload_key(request.POST.get("key", ""), file.name or "")
    if why:
        return "", why, 400
    try:
        space = ensure_space(request.user.pk)
        iam.s3_as(space.access_key, space.secret_key).upload_fileobj(file, space.bucket, key)
    except iam.StorageUnavailable:
        return "", UNAVAILABLE, 503
    except Exception as exc:  # the user's own keys refused, the endpoint went away mid-upload
        return "", f"The upload failed: {iam.error_code(exc) or exc}", 502
    return f"s3://{space.bucket}/{key}", "", 201
