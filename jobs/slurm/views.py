"""The batch step's redemption of a job's launch key (nodeagent.slurm_protocol)."""

from __future__ import annotations

import json

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from . import steps


@csrf_exempt  # no session: the launch key in the Authorization header is the credential
@require_POST
def redeem_run(request: HttpRequest) -> JsonResponse:
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    try:
        data = json.loads(request.body or b"{}")
    except ValueError:
        return JsonResponse({"error": "the body is not JSON"}, status=400)
    try:
        token, attempt = steps.redeem(key.strip() if scheme.lower() == "bearer" else "", data)
    except steps.Refused as refused:
        return JsonResponse({"error": str(refused)}, status=refused.status)
    return JsonResponse({"token": token, "attempt": attempt}, status=201)
