"""Database calls of the agents' WebSocket: on a bounded pool of threads, without per-message checks.

Channels' `database_sync_to_async` runs every call on one shared thread (thread_sensitive) and
checks the connection before and after each: at a fleet's message rate that thread is the
bottleneck. Agent messages need neither: each job write locks its own rows, so they run on the
event loop's bounded thread pool, and a broken connection is dropped only when a call failed
with it (the next call on that thread opens a new one).
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import DatabaseError, InterfaceError, OperationalError, connection

P = ParamSpec("P")
R = TypeVar("R")

# the console cannot reach its database now: not the message's fault, try again later
OUTAGE_ERRORS: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)
# PostgreSQL chose this call as a deadlock's victim, or its transaction could not be serialized:
# the work was rolled back and is run again (a message's handling is idempotent, as a re-send is)
RETRIED_SQLSTATES = frozenset({"40P01", "40001"})
ATTEMPTS = 4


def call_with_retries(func: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Call `func` on this thread's connection; a deadlock victim or a serialization failure is
    run again, and a connection a failure broke is dropped (the next call opens a new one)."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return func(*args, **kwargs)
        except DatabaseError as exc:
            if connection.connection is not None and (connection.errors_occurred or not connection.is_usable()):
                connection.close()
            if attempt == ATTEMPTS or getattr(exc.__cause__, "sqlstate", None) not in RETRIED_SQLSTATES \
                    or connection.in_atomic_block:  # inside a caller's transaction: the caller retries
                raise
            time.sleep(random.uniform(0.01, 0.05) * attempt)
    raise AssertionError("unreachable")


def agent_db(func: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    return sync_to_async(functools.partial(call_with_retries, func), thread_sensitive=False)


def on_thread(executor: ThreadPoolExecutor, func: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Like `agent_db`, on `executor`'s own threads: work that must not queue behind a backlog of
    agent messages in the shared pool (the heartbeat book's flush: jobs.channel.heartbeats)."""
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.get_running_loop().run_in_executor(executor, functools.partial(call_with_retries, func, *args, **kwargs))
    return call
