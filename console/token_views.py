"""`/account/token/`: a user creates, rotates and revokes their own API token (DRF's authtoken).

The key is shown once, in the answer to the POST that made it (not stored in the session, not
shown again): the `simpleai` command and REST clients send it as `Authorization: Token <key>`.
Kept apart from the account page so the two merge easily; that page links here.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods
from rest_framework.authtoken.models import Token

CONFIRM_MESSAGE = "Tick the box to confirm: your current token stops working at once."


@transaction.atomic
def rotate_token(user: Any) -> Token:
    """A new token for `user`; the old one, if any, stops working. The user row's lock keeps two
    rotations at once (two tabs) from both deleting and then both creating."""
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()
    Token.objects.filter(user=user).delete()
    return Token.objects.create(user=user)


@never_cache  # the answer to a POST holds the key
@require_http_methods(["GET", "POST"])
def api_token(request: HttpRequest) -> HttpResponse:
    token = Token.objects.filter(user=request.user).first()
    context: dict[str, Any] = {"token": token, "console_url": request.build_absolute_uri("/").rstrip("/")}
    if request.method == "POST":
        if request.POST.get("action") == "revoke":
            Token.objects.filter(user=request.user).delete()
            context.update(token=None, revoked=token is not None)
        elif token is not None and request.POST.get("confirm") != "on":
            context["error"] = CONFIRM_MESSAGE
        else:
            token = rotate_token(request.user)
            context.update(token=token, new_key=token.key)
    return render(request, "console/api_token.html", context, status=400 if "error" in context else 200)
