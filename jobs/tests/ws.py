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


def browser_socket(path: str, cookie: str | None) -> WebsocketCommunicator:
    """A browser's socket on `path` from an allowed origin, with or without a session."""
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    if cookie:
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    return WebsocketCommunicator(application, path, headers=headers)


def job_socket(job_id: int, cookie: str | None) -> WebsocketCommunicator:
    """A browser's socket on /ws/jobs/<id>/, with or without a session."""
    return browser_socket(f"/ws/jobs/{job_id}/", cookie)


async def refusal(socket: WebsocketCommunicator) -> int | str:
    """Connect and return the close code the server refuses with; "handshake refused" when it
    refused the handshake itself (a browser sees that as HTTP 403 and close code 1006)."""
    accepted, _ = await socket.connect()
    if not accepted:
        return "handshake refused"
    message = await socket.receive_output(timeout=5)
    assert message["type"] == "websocket.close", f"expected a close, got {message}"
    return message.get("code", 1000)
