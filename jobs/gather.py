"""Many connections' requests, answered by one call for all of them (a fleet's agents).

A thousand agents each ask the database for little: store my messages, what should I run. One
call per request left the console making thousands of small round trips a second, each waiting
its turn on a few threads. A Gatherer takes everything asked while its earlier calls ran and
answers it with one call of a function that takes a list: under light load a call answers one
request, as soon as it comes; under a backlog each call answers hundreds.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class _State(Generic[T, R]):
    waiting: deque[tuple[T, asyncio.Future[R]]] = field(default_factory=deque)
    busy: int = 0
    calls: set[asyncio.Task[None]] = field(default_factory=set)  # under way (the loop keeps tasks only weakly)


class Gatherer(Generic[T, R]):
    """`func(items) -> results` (one each, in order) run on `executor` for what was asked
    meanwhile: at most `concurrency` calls at once, each with items weighing `limit` at most
    (one heavier item goes alone). `taken(item)` is called as a call takes an item: until
    then the asker may still add to it."""

    def __init__(self, func: Callable[[list[T]], Sequence[R]], executor: Executor, *, concurrency: int,
                 limit: int, weight: Callable[[T], int] = lambda item: 1,
                 taken: Callable[[T], None] = lambda item: None) -> None:
        self.func, self.executor = func, executor
        self.concurrency, self.limit, self.weight, self.taken = concurrency, limit, weight, taken
        # per event loop: daphne has one, but tests run each WebSocket conversation on its own
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _State[T, R]] = weakref.WeakKeyDictionary()

    async def ask(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        state = self._states.setdefault(loop, _State())
        future: asyncio.Future[R] = loop.create_future()
        state.waiting.append((item, future))
        self._start(loop, state)
        return await future

    def _start(self, loop: asyncio.AbstractEventLoop, state: _State[T, R]) -> None:
        while state.waiting and state.busy < self.concurrency:
            taken: list[tuple[T, asyncio.Future[R]]] = []
            load = 0
            while state.waiting and (not taken or load + self.weight(state.waiting[0][0]) <= self.limit):
                item, future = state.waiting.popleft()
                if not future.done():  # a cancelled asker (its connection went) is not served
                    self.taken(item)
                    taken.append((item, future))
                    load += self.weight(item)
            if not taken:
                return
            state.busy += 1
            call = loop.create_task(self._call(loop, state, taken))
            state.calls.add(call)
            call.add_done_callback(state.calls.discard)

    async def _call(self, loop: asyncio.AbstractEventLoop, state: _State[T, R], taken: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await loop.run_in_executor(self.executor, self.func, [item for item, _ in taken])
        except Exception as exc:
            for _, future in taken:
                if not future.done():
                    future.set_exception(exc)
        else:
            for (_, future), result in zip(taken, results, strict=True):
                if not future.done():
                    future.set_result(result)
        finally:
            state.busy -= 1
            self._start(loop, state)
