"""HTTP to the console's API with a token, over the standard library (urllib).

Turns every failure into one of simpleai.errors: a 400's body into its field messages, a 401
into "the console refused the token", a dropped connection into `Unreachable`.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from . import __version__
from .errors import ApiError, AuthRefused, NotFound, SimpleAIError, Unreachable

Query = Mapping[str, str | int | float | None]


def token_page(url: str) -> str:
    return f"{url}/account/token/"


def refused_token(url: str) -> AuthRefused:
    return AuthRefused(f"the console refused the token: get one on your account page ({token_page(url)})")


def missing_token(url: str) -> AuthRefused:
    return AuthRefused(f"no API token: get one on your account page ({token_page(url)}), then run `simpleai login {url}`")


def field_messages(body: object) -> dict[str, list[str]]:
    """A DRF 400 body as {field: [messages]}; nested errors (a list's items) are flattened."""
    if not isinstance(body, dict):
        return {"non_field_errors": _flatten(body)}
    return {str(field): _flatten(value) for field, value in body.items()}


def _flatten(value: object) -> list[str]:
    if isinstance(value, dict):
        return [message for item in value.values() for message in _flatten(item)]
    if isinstance(value, list):
        return [message for item in value for message in _flatten(item)]
    return [str(value)] if value not in (None, "") else []


def one_line(fields: Mapping[str, list[str]]) -> str:
    """`name: Enter 3 to 63 characters.; gpus_per_node: …`: every message, on one line."""
    parts = []
    for field, messages in fields.items():
        text = " ".join(messages)
        parts.append(text if field in {"non_field_errors", "detail"} else f"{field}: {text}")
    return "; ".join(parts)


class Transport:
    """Requests to `url` (the console's base URL, no trailing slash) as the token's user."""

    def __init__(self, url: str, token: str, timeout: float = 30.0) -> None:
        self.url, self.token, self.timeout = url, token, timeout

    def request(self, method: str, path: str, query: Query | None = None, body: object = None) -> Any:
        """The answer's JSON (None for an empty answer); raises simpleai.errors on any failure."""
        if not self.token:
            raise missing_token(self.url)
        request = urllib.request.Request(self._address(path, query), method=method, headers=self._headers(body))
        if body is not None:
            request.data = json.dumps(body).encode()
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return self._parse(response.read())
        except urllib.error.HTTPError as error:
            raise self._refusal(error.code, error.reason, error.read()) from None
        except (urllib.error.URLError, http.client.HTTPException, ssl.SSLError, OSError) as error:
            reason = getattr(error, "reason", None) or error
            raise Unreachable(f"cannot reach the console at {self.url}: {reason}") from None

    def _address(self, path: str, query: Query | None) -> str:
        params = {name: value for name, value in (query or {}).items() if value is not None}
        return f"{self.url}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")

    def _headers(self, body: object) -> dict[str, str]:
        headers = {"Authorization": f"Token {self.token}", "Accept": "application/json",
                   "User-Agent": f"simpleai/{__version__}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        return headers

    def _parse(self, raw: bytes) -> Any:
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise SimpleAIError(f"{self.url} answered with something that is not the API: is it the console's address?") from None

    def _refusal(self, status: int, reason: str, raw: bytes) -> SimpleAIError:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        detail = body.get("detail") if isinstance(body, dict) else None
        if status == 401:
            return refused_token(self.url)
        if status == 404:
            return NotFound(str(detail or "not found"))
        if status == 400 and body is not None:
            fields = field_messages(body)
            return ApiError(status, one_line(fields), fields)
        return ApiError(status, str(detail or f"the console answered {status} {reason}"))
