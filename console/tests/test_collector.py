"""The console's server processes keep what they imported out of the garbage collector's walks."""

import gc
import importlib
import sys
import weakref

import pytest


@pytest.fixture
def serving():
    """This test process as daphne runs it (console.serving), then back to Python's defaults, so
    the rest of the suite does not run frozen."""
    from console import collector

    threshold = gc.get_threshold()
    if "console.serving" in sys.modules:
        importlib.reload(sys.modules["console.serving"])
    else:
        importlib.import_module("console.serving")
    yield collector
    gc.unfreeze()
    gc.set_threshold(*threshold)
    gc.callbacks.remove(collector._report_slow_pauses)


def test_importing_the_application_for_tests_leaves_the_collector_alone():
    import console.asgi  # noqa: F401  what the suite's WebSocket tests import
    from console import collector

    assert gc.get_freeze_count() == 0
    assert gc.get_threshold()[0] != collector.YOUNG_COLLECTION_AFTER


def test_serving_freezes_the_imported_and_still_collects_what_comes_after(serving):
    assert gc.get_freeze_count() > 50_000  # Django and the apps: no full collection walks them
    assert gc.get_threshold()[0] == serving.YOUNG_COLLECTION_AFTER

    class Row:
        pass

    row = Row()
    row.itself = row  # a reference cycle made while serving: only the collector frees it
    gone = weakref.ref(row)
    del row
    gc.collect()
    assert gone() is None


def test_a_long_collection_is_logged_where_it_paused_the_process(serving, monkeypatch, caplog):
    monkeypatch.setattr(serving, "SLOW_PAUSE_SECONDS", 0.0)  # every collection counts as long
    with caplog.at_level("WARNING", logger="console.collector"):
        gc.collect()
    assert any("garbage collection of generation 2 paused this process for" in r.getMessage() for r in caplog.records)
