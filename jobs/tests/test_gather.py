"""A Gatherer (jobs.channel.gather) answers what many connections ask meanwhile with one call: alone a
request is served at once; behind a busy call, everything asked meanwhile goes in the next."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from jobs.channel.gather import Gatherer


class Recorder:
    """A batch function that records its calls; `gate` holds the first call until released."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.gate = threading.Event()
        self.started = threading.Event()

    def __call__(self, items: list[int]) -> list[int]:
        self.calls.append(list(items))
        self.started.set()
        self.gate.wait(5)
        if -1 in items:
            raise ValueError("a bad item")
        return [item * 10 for item in items]


@pytest.fixture
def pool():
    with ThreadPoolExecutor(4) as executor:
        yield executor


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 10))


def test_a_lone_request_is_answered_at_once(pool):
    record = Recorder()
    record.gate.set()
    gatherer = Gatherer(record, pool, concurrency=1, limit=100)
    assert run(gatherer.ask(3)) == 30 and record.calls == [[3]]


async def behind_a_running_call(gatherer: Gatherer, record: Recorder, items: list[int]) -> tuple[int, list]:
    """Ask for 1; while that call runs (held at the recorder's gate), ask for `items`; then let
    the call end. Returns the first answer and the others' (an exception as its value)."""
    first = asyncio.ensure_future(gatherer.ask(1))
    await asyncio.get_running_loop().run_in_executor(None, record.started.wait, 5)
    later = [asyncio.ensure_future(gatherer.ask(n)) for n in items]
    await asyncio.sleep(0.05)
    record.gate.set()
    return await first, await asyncio.gather(*later, return_exceptions=True)


def test_requests_made_while_a_call_runs_are_answered_together_in_order(pool):
    record = Recorder()
    gatherer = Gatherer(record, pool, concurrency=1, limit=100)
    assert run(behind_a_running_call(gatherer, record, [2, 3, 4])) == (10, [20, 30, 40])
    assert record.calls == [[1], [2, 3, 4]]


def test_a_call_takes_no_more_than_its_limit_and_a_heavy_item_goes_alone(pool):
    record = Recorder()
    gatherer = Gatherer(record, pool, concurrency=1, limit=5, weight=lambda item: item)
    run(behind_a_running_call(gatherer, record, [2, 3, 9, 1]))
    assert record.calls == [[1], [2, 3], [9], [1]]


def test_a_failed_call_fails_each_of_its_askers_and_not_the_next_call(pool):
    record = Recorder()
    gatherer = Gatherer(record, pool, concurrency=1, limit=100)
    first, results = run(behind_a_running_call(gatherer, record, [-1, 2]))
    assert first == 10 and run(gatherer.ask(5)) == 50
    assert [type(r) for r in results] == [ValueError, ValueError]


def test_an_asker_that_went_away_is_not_served(pool):
    record = Recorder()
    gatherer = Gatherer(record, pool, concurrency=1, limit=100)

    async def scenario():
        first = asyncio.ensure_future(gatherer.ask(1))
        await asyncio.get_running_loop().run_in_executor(None, record.started.wait, 5)
        gone = asyncio.ensure_future(gatherer.ask(2))
        kept = asyncio.ensure_future(gatherer.ask(3))
        await asyncio.sleep(0.01)
        gone.cancel()  # its connection closed while it waited
        record.gate.set()
        return await first, await kept

    assert run(scenario()) == (10, 30)
    assert record.calls == [[1], [3]]


def test_a_request_whose_keys_a_running_call_holds_waits_while_others_run_beside_it(pool):
    """The agents' store: two transactions that write the same job run in series anyway; a call
    of other jobs' messages runs beside the first instead of waiting behind its locks."""
    record = Recorder()  # only the call with item 1 waits at the gate
    keys = {1: {"a"}, 2: {"a"}, 3: {"b"}, 4: {"a", "c"}, 5: {"d"}, 6: {"c"}}

    def call(items: list[int]) -> list[int]:
        if 1 in items:
            return record(items)
        record.calls.append(list(items))
        return [item * 10 for item in items]

    gatherer = Gatherer(call, pool, concurrency=2, limit=100, keys=keys.__getitem__)

    async def scenario():
        first = asyncio.ensure_future(gatherer.ask(1))
        await asyncio.get_running_loop().run_in_executor(None, record.started.wait, 5)
        later = [asyncio.ensure_future(gatherer.ask(n)) for n in (2, 3, 4, 5, 6)]
        await asyncio.sleep(0.2)
        beside = [list(c) for c in record.calls]  # while the first call still runs
        record.gate.set()
        return beside, await first, await asyncio.gather(*later)

    beside, first, later = run(scenario())
    # 2 and 4 write "a", held by the running call; 6 shares "c" with the waiting 4: it keeps its turn
    assert beside == [[1], [3], [5]]
    assert record.calls == [[1], [3], [5], [2, 4, 6]]
    assert (first, later) == (10, [20, 30, 40, 50, 60])
