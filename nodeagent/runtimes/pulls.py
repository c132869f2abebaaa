"""Why an image pull failed, in words a user can act on, without ever repeating the password.

Plain functions over exceptions and strings (no engine): the Docker runtime calls them, the
unit tests cover every wording seen from Docker Engine and from Podman's Docker API.

A failed pull is one of
  authentication failed  the registry refused the job's user ID / password (or wants some)
  not found              the repository or the tag does not exist
  invalid reference      the engine cannot parse the image name
  registry unreachable   no answer from the registry (retried with backoff before giving up)
  pull failed            anything else (the engine's own failure)
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable

AUTHENTICATION = "authentication failed"
NOT_FOUND = "not found"
INVALID_REFERENCE = "invalid reference"
UNREACHABLE = "registry unreachable"
OTHER = "pull failed"

# Only a registry that did not answer is worth asking again: a refusal stays a refusal.
RETRYABLE = frozenset({UNREACHABLE})

_AUTH_WORDS = (
    "unauthorized", "authentication required", "access denied", "access to the requested resource is not authorized",
    "incorrect username or password", "denied:", "pull access denied", "forbidden",
)
_INVALID_WORDS = (
    "invalid reference", "invalid repository name", "repository name must", "invalid tag format",
    "invalid image name", "invalid reference format",
)
_UNREACHABLE_WORDS = (
    "connection refused", "no such host", "i/o timeout", "network is unreachable", "no route to host",
    "connection reset", "tls handshake timeout", "server misbehaving", "timeout awaiting response headers",
    "temporary failure in name resolution", "service unavailable", "bad gateway", "gateway timeout",
    "pinging container registry", "context deadline exceeded",
)
_TLS_WORDS = ("http response to https client", "x509:", "certificate")
_NOT_FOUND_WORDS = ("manifest unknown", "name unknown", "not found", "no such image", "does not exist")
DETAIL_LIMIT = 200
MESSAGE_LIMIT = 480  # the console keeps a status reason of up to 500 characters


class PullError(Exception):
    """A pull that did not succeed: `kind` is one of the five above, `detail` the engine's words."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail


def error_text(exc: BaseException) -> str:
    """What the engine said, without the SDK's request URL when it has its own explanation."""
    explanation = getattr(exc, "explanation", None)
    if explanation:
        return str(explanation)
    return str(exc) or type(exc).__name__


def classify(exc: BaseException) -> str:
    """One of the five kinds, from the exception's type, HTTP status and text (in that order of trust)."""
    from docker import errors

    text = f"{exc} {getattr(exc, 'explanation', '') or ''}".lower()
    status = getattr(exc, "status_code", None)
    if isinstance(exc, PullError):
        return exc.kind
    # Podman's Docker API reports a refused login as ImageNotFound or a 500: read the text first
    if status in (401, 403) or any(word in text for word in _AUTH_WORDS):
        return AUTHENTICATION
    if isinstance(exc, errors.InvalidRepository | errors.NullResource) or status == 400 \
            or any(word in text for word in _INVALID_WORDS):
        return INVALID_REFERENCE
    if any(word in text for word in _TLS_WORDS):
        return OTHER  # the registry answered, but not as the engine expects: retrying will not help
    if status in (502, 503, 504) or any(word in text for word in _UNREACHABLE_WORDS):
        return UNREACHABLE
    if isinstance(exc, errors.NotFound) or status == 404 or any(word in text for word in _NOT_FOUND_WORDS):
        return NOT_FOUND
    return OTHER


def _what(kind: str, image: str, has_credentials: bool, tries: int) -> str:
    if kind == AUTHENTICATION:
        if has_credentials:
            return f"authentication failed for {image}: the registry refused the job's user ID and password"
        return f"authentication failed for {image}: the registry wants a user ID and password, and the job gives none"
    if kind == NOT_FOUND:
        return f"image not found: {image} does not exist in its registry (check the repository name and the tag)"
    if kind == INVALID_REFERENCE:
        return f"invalid image reference {image} (an image looks like registry.example.com:5000/team/name:tag)"
    if kind == UNREACHABLE:
        return f"registry unreachable for {image} ({tries} tries)"
    return f"pull failed for {image}"


# Podman and containers/image prefix the registry's answer with what they were doing, which
# repeats the image name; the answer itself is what a user needs.
_PREFIXES = re.compile(r"^(?:initializing source \S+: |reading manifest \S+ in \S+: |pinging container registry \S+: )+")


def condense(detail: str) -> str:
    return _PREFIXES.sub("", detail.strip())


def failure_message(node: str, image: str, error: PullError, has_credentials: bool, tries: int,
                    secrets: Iterable[str] = ()) -> str:
    """The status reason, log line and API text of an image that could not be pulled."""
    detail = condense(redact(error.detail, secrets))
    if len(detail) > DETAIL_LIMIT:
        detail = "…" + detail[-DETAIL_LIMIT:]  # the end of the chain of causes says the most
    where = f" on {node}" if node else ""
    message = f"Image pull failed{where}: {_what(error.kind, image, has_credentials, tries)}"
    if detail:
        message += f". The engine said: {detail}"
    return redact(message, secrets)[:MESSAGE_LIMIT]


def secret_forms(username: str, password: str) -> list[str]:
    """The password as it could leak: itself, and base64 of `user:password` and of the Docker auth header."""
    if not password:
        return []
    header = json.dumps({"username": username, "password": password}).encode()
    return [
        password,
        base64.b64encode(f"{username}:{password}".encode()).decode(),
        base64.urlsafe_b64encode(header).decode(),
    ]


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "********")
    return text
