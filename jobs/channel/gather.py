"""Many connections' requests, answered by one call for all of them (a fleet's agents).

A thousand agents each ask the database for little: store my messages, what should I run. One
call per request left the console making thousands of small round trips a second, each waiting
its turn on a few threads. A Gatherer takes everything asked while its earlier calls ran and
answers it with one call of a function that takes a list: under light load a call answers one
request, as soon as it comes; under a backlog each call answers hundreds.

Calls run side by side only when they do not conflict: items may name keys (the agents' store:
the jobs their messages write), and an item whose keys a running call holds waits for the next
call. Two store transactions that lock rows of the same job run one after the other anyway (the
second waits for the first's commit); handed the same jobs, each of two calls of hundreds of
nodes' messages named one of the other's and waited for it, and the pair ran in series.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class _State(Generic[T, R]):
    waiting: deque[tuple[T, asyncio.Future[R]]] = field(default_factory=deque)
    busy: int = 0
    held: Counter[object] = field(default_factory=Counter)  # keys of the calls under way
    calls: set[asyncio.Task[None]] = field(default_factory=set)  # under way (the loop keeps tasks only weakly)


class Gatherer(Generic[T, R]):
    """`func(items) -> results` (one each, in order) run on `executor` for what was asked
    meanwhile: at most `concurrency` calls at once, each with items weighing `limit` at most
    (one heavier item goes alone). `taken(item)` is called as a call takes an item: until
    then the asker may still add to it. An item whose `keys(item)` a running call holds waits
    (so does any later item that shares a key with a waiting one: they keep their order)."""

    def __init__(self, func: Callable[[list[T]], Sequence[R]], executor: Executor, *, concurrency: int,
                 limit: int, weight: Callable[[T], int] = lambda item: 1,
                 taken: Callable[[T], None] = lambda item: None,
                 keys: Callable[[T], Iterable[object]] = lambda item: ()) -> None:
        self.func, self.executor = func, executor
        self.concurrency, self.limit, self.weight, self.taken, self.keys = concurrency, limit, weight, taken, keys
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
            taken, keys = self._take(state)
            if not taken:
                return
            state.busy += 1
            state.held.update(keys)
            call = loop.create_task(self._call(loop, state, taken, keys))
            state.calls.add(call)
            call.add_done_callback(state.calls.discard)

    def _take(self, state: _State[T, R]) -> tuple[list[tuple[T, asyncio.Future[R]]], set[object]]:
        """The next call's items, in order, within the limit; the others stay, in order."""
        taken: list[tuple[T, asyncio.Future[R]]] = []
        left: deque[tuple[T, asyncio.Future[R]]] = deque()
        keys: set[object] = set()
        blocked: set[object] = set()  # keys of items left waiting: a later one must not pass them
        load = 0
        while state.waiting:
            item, future = state.waiting.popleft()
            if future.done():  # a cancelled asker (its connection went) is not served
                continue
            if taken and load + self.weight(item) > self.limit:
                state.waiting.appendleft((item, future))
                break
            mine = set(self.keys(item))
            if any(key in state.held or key in blocked for key in mine):
                blocked |= mine
                left.append((item, future))
                continue
            self.taken(item)
            taken.append((item, future))
            keys |= mine
            load += self.weight(item)
        state.waiting.extendleft(reversed(left))
        return taken, keys

    async def _call(self, loop: asyncio.AbstractEventLoop, state: _State[T, R], taken: list[tuple[T, asyncio.Future[R]]],
                    keys: set[object]) -> None:
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
            state.held.subtract(keys)
            state.held = +state.held  # drop the keys no call holds any more
            self._start(loop, state)
