"""The console's server processes keep what they imported out of the garbage collector's walks."""

import gc
import weakref


def test_serving_freezes_the_imported_and_still_collects_what_comes_after():
    import console.asgi  # noqa: F401  what daphne imports to serve; it freezes at the end

    assert gc.get_freeze_count() > 50_000  # Django and the apps: no full collection walks them

    class Row:
        pass

    row = Row()
    row.itself = row  # a reference cycle made while serving: only the collector frees it
    gone = weakref.ref(row)
    del row
    gc.collect()
    assert gone() is None



def test_a_long_collection_is_logged_where_it_paused_the_process(monkeypatch, caplog):
    import console.asgi  # noqa: F401
    from console import collector

    monkeypatch.setattr(collector, "SLOW_PAUSE_SECONDS", 0.0)  # every collection counts as long
    with caplog.at_level("WARNING", logger="console.collector"):
        gc.collect()
    assert any("garbage collection of generation 2 paused this process for" in r.getMessage() for r in caplog.records)
