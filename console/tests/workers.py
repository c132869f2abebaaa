"""The suite across pytest-xdist workers (`make test` runs TEST_WORKERS of them).

Loaded with `-p` (pyproject's addopts) so that it runs before pytest-django reads the settings.
Each worker is a test session of its own: pytest-django gives it its own PostgreSQL database,
this gives it its own Redis database (the Celery queues, the Channels layer and the scheduler's
request flag of one worker's console never reach another's), and the root conftest starts its
job ids apart (the rendezvous ports derived from them). The real services a session starts
(SeaweedFS, Podman and its registry, Slurm) are private to it already. Without xdist nothing
here changes anything.

How the tests are dealt out:
- a unit of work is a module (its module-scoped fixtures, such as the end-to-end console stack,
  start once), except that the shards of a test parametrized `shard-N` are units of their own;
- the data the migrations seed (server types, environments, contract terms) is gone after a
  transactional test's flush, so every worker runs its units without transactional tests first
  and the others after, and no module may mix plain database tests with transactional ones;
- within each of the two parts, the longest units go first: a test's expected seconds come
  from its `duration` mark, else 10 for a `slow` one and 0.3 for the others.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", … in a worker; "" otherwise


def worker_index() -> int:
    """0 outside xdist and in its first worker; n in worker gw<n>."""
    return int(WORKER[2:]) if WORKER.startswith("gw") else 0


def _own_redis_database(url: str, index: int) -> str:
    """The worker's Redis database: the configured one for gw0, one lower for each next worker."""
    match = re.fullmatch(r"(redis://[^/]*)(?:/(\d+))?", url)
    if match is None or index == 0:
        return url
    database = int(match.group(2) or 0) - index
    if database < 0:
        raise pytest.UsageError(f"too many test workers for the Redis databases below {url}")
    return f"{match.group(1)}/{database}"


if WORKER:
    os.environ["REDIS_URL"] = _own_redis_database(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14"), worker_index())
    os.environ.pop("CELERY_BROKER_URL", None)  # follows REDIS_URL


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "duration(seconds): expected seconds on a 2-core machine (dealing tests out)")


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to (the same answer on the controller and in workers)."""
    module, _, rest = nodeid.partition("::")
    return nodeid if re.search(r"\[shard-\d+\]$", rest) else module


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """LoadScope's scheduling over `unit_of`, in the order the workers collected the units."""

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False  # keep the order pytest_collection_modifyitems chose
    return UnitScheduling(config, log)


PLAIN_DB, TRANSACTIONAL, NO_DB = 0, 1, 2


def _database_use(item: pytest.Item) -> int:
    """As pytest-django orders tests: plain database tests, transactional ones, the others."""
    marker = item.get_closest_marker("django_db")
    fixtures = getattr(item, "fixturenames", ())
    if (marker is not None and (marker.kwargs.get("transaction") or marker.kwargs.get("reset_sequences"))) \
            or "transactional_db" in fixtures or "live_server" in fixtures:
        return TRANSACTIONAL
    return PLAIN_DB if marker is not None or "db" in fixtures else NO_DB


def _seconds(item: pytest.Item) -> float:
    mark = item.get_closest_marker("duration")
    if mark is not None:
        return float(mark.args[0])
    return 10.0 if item.get_closest_marker("slow") else 0.3


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a worker, after pytest-django's own ordering (which stays as it is within each unit)."""
    if not WORKER:
        return
    seconds: dict[str, float] = {}
    uses: dict[str, set[int]] = {}
    for item in items:
        unit = unit_of(item.nodeid)
        seconds[unit] = seconds.get(unit, 0.0) + _seconds(item)
        uses.setdefault(unit, set()).add(_database_use(item))
    mixed = sorted(unit for unit, used in uses.items() if {PLAIN_DB, TRANSACTIONAL} <= used)
    if mixed:
        raise pytest.UsageError(f"split these modules: their plain database tests would run after another "
                                f"module's transactional test flushed the seeded data: {', '.join(mixed)}")
    position = {item.nodeid: n for n, item in enumerate(items)}

    def order(item: pytest.Item) -> tuple[bool, float, str, int]:
        unit = unit_of(item.nodeid)
        return TRANSACTIONAL in uses[unit], -seconds[unit], unit, position[item.nodeid]

    items.sort(key=order)
