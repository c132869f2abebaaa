"""A tiny JSON-over-HTTP client for benchmarks (standard library only)."""

from __future__ import annotations

import json
import urllib.request


def post_json(url: str, token: str, payload: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Token {token}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())
