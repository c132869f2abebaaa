"""What the browser WebSockets of every app share: the close codes the pages act on, and how a
refusal is sent. Here, not in one app's consumers, so jobs and monitoring both read it without
one app's web layer importing the other's.

static/js/live_socket.js stops reconnecting on the same two refusal codes (console/tests/
test_socket_codes.py keeps the two in step). The node agent's close codes belong to its
protocol (nodeagent.protocol), which the agent imports without Django.
"""

from __future__ import annotations

from channels.generic.websocket import AsyncWebsocketConsumer

CLOSE_UNAUTHENTICATED = 4401  # no session: the page says "log in again" and stops reconnecting
CLOSE_NOT_FOUND = 4404  # not a job of this user's (or it was deleted): the page says so and stops
CLOSE_RETRY = 1011  # a server-side failure: the page reconnects (with its cursor)


async def refuse(consumer: AsyncWebsocketConsumer, code: int) -> None:
    """Accept, then close with `code`. A close before the accept reaches the browser as an HTTP
    403 handshake failure (close code 1006), which a page cannot tell from a network error."""
    await consumer.accept()
    await consumer.close(code=code)
