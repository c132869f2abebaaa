"""WebSocket clients of the real ASGI application, logged in through a session cookie."""

from __future__ import annotations

import asyncio
import functools
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import async_to_sync
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


# a task still running this long after a cancel is cancelled again, this many times at most
SETTLE_SECONDS = 1.0
SETTLE_ROUNDS = 10


def settled(scenario: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    """async_to_sync(scenario), and what the scenario left running (a consumer it did not
    disconnect, that consumer's channel-layer receive) is stopped before its event loop closes.

    asyncio.run cancels leftover tasks once and waits for them without a limit: in CI a test hung
    until its 300 s timeout with the loop idle, a task's cleanup waiting after that one cancel
    (daphne logs the same of a channel-layer receive, and cancels it again). Here each leftover
    is cancelled again every second until none is left."""

    @functools.wraps(scenario)
    async def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return await scenario(*args, **kwargs)
        finally:
            await _stop_leftover_tasks()

    return async_to_sync(run)


async def _stop_leftover_tasks() -> None:
    me = asyncio.current_task()
    for round_ in range(SETTLE_ROUNDS):
        left = [task for task in asyncio.all_tasks() if task is not me and not task.done()]
        if not left:
            return
        if round_:
            warnings.warn(f"still running {SETTLE_SECONDS:.0f} s after being cancelled: {left}", stacklevel=1)
        for task in left:
            task.cancel()
        await asyncio.wait(left, timeout=SETTLE_SECONDS)
