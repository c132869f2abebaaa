"""What the browser WebSockets of every app share: the close codes the pages act on, how a
refusal is sent, and the base consumer that checks the login and the ownership. Here, not in one app's consumers, so jobs and monitoring both read it without
one app's web layer importing the other's.

static/js/live_socket.js stops reconnecting on the same two refusal codes (console/tests/
test_socket_codes.py keeps the two in step). The node agent's close codes belong to its
protocol (nodeagent.protocol), which the agent imports without Django.
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer

CLOSE_UNAUTHENTICATED = 4401  # no session: the page says "log in again" and stops reconnecting
CLOSE_NOT_FOUND = 4404  # not a job of this user's (or it was deleted): the page says so and stops
CLOSE_RETRY = 1011  # a server-side failure: the page reconnects (with its cursor)


async def refuse(consumer: AsyncWebsocketConsumer, code: int) -> None:
    """Accept, then close with `code`. A close before the accept reaches the browser as an HTTP
    403 handshake failure (close code 1006), which a page cannot tell from a network error."""
    await consumer.accept()
    await consumer.close(code=code)


class OwnerSocket(AsyncJsonWebsocketConsumer):
    """A browser socket of one user's things: refused with 4401 without a login and with 4404 where
    `owns` says no (another user's thing is answered like a missing one); else `start` runs.

    Subclasses write `owns` and `start`, never their own `connect`, so no socket forgets a check.
    """

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await refuse(self, CLOSE_UNAUTHENTICATED)
            return
        if not await database_sync_to_async(self.owns)(user):
            await refuse(self, CLOSE_NOT_FOUND)
            return
        await self.start(user)

    def owns(self, user: Any) -> bool:
        """Whether the logged-in `user` may watch what the URL names; runs in a worker thread, so
        it may read the database. The default is for sockets that only ever show the user's own."""
        return True

    async def start(self, user: Any) -> None:
        """Join the groups and accept (the checks passed)."""
        raise NotImplementedError
