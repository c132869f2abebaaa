"""WebSocket clients of the real ASGI application, logged in through a session cookie."""

from __future__ import annotations

from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from console.asgi import application


def session_cookie(user) -> str:
    """The session cookie a browser would hold after logging in as `user`."""
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def job_socket(job_id: int, cookie: str | None) -> WebsocketCommunicator:
    """A browser's socket on /ws/jobs/<id>/ from an allowed origin, with or without a session."""
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    if cookie:
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    return WebsocketCommunicator(application, f"/ws/jobs/{job_id}/", headers=headers)
