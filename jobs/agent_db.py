"""Database calls of the agents' WebSocket: on a bounded pool of threads, without per-message checks.

Channels' `database_sync_to_async` runs every call on one shared thread (thread_sensitive) and
checks the connection before and after each: at a fleet's message rate that thread is the
bottleneck. Agent messages need neither: each job write locks its own rows, so they run on the
event loop's bounded thread pool, and a broken connection is dropped only when a call failed
with it (the next call on that thread opens a new one).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import DatabaseError, InterfaceError, OperationalError, connection

P = ParamSpec("P")
R = TypeVar("R")

# the console cannot reach its database now: not the message's fault, try again later
OUTAGE_ERRORS: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)


def _call(func: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    try:
        return func(*args, **kwargs)
    except DatabaseError:
        if connection.connection is not None and (connection.errors_occurred or not connection.is_usable()):
            connection.close()
        raise


def agent_db(func: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    return sync_to_async(functools.partial(_call, func), thread_sensitive=False)  # type: ignore[return-value]
