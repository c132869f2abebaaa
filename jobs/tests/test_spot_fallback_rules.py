"""Spot with a deadline: the plain rules (jobs.recovery.spot_fallback), no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobs.recovery import spot_fallback

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def test_it_falls_back_once_the_budget_has_run_out_and_not_before():
    assert not spot_fallback.due(T0, 10, T0 + timedelta(minutes=9, seconds=59))
    assert spot_fallback.due(T0, 10, T0 + timedelta(minutes=10))
    assert spot_fallback.due(T0, 0, T0)  # 0: on-demand as soon as spot capacity is gone


def test_without_a_budget_it_waits_for_spot_capacity_forever():
    assert not spot_fallback.due(T0, None, T0 + timedelta(days=30))
    assert not spot_fallback.due(None, 10, T0)  # never interrupted


def test_it_rejects_a_budget_that_is_not_a_whole_number_of_minutes_in_range():
    for bad in (-1, spot_fallback.MAX_FALLBACK_MINUTES + 1, 2.5, "10", True):
        assert spot_fallback.fallback_error("spot", bad) == spot_fallback.FALLBACK_MESSAGE, bad
    assert spot_fallback.fallback_error("spot", 30) is None
    assert spot_fallback.fallback_error("spot", None) is None


def test_it_rejects_a_budget_on_an_on_demand_job():
    assert spot_fallback.fallback_error("on_demand", 30) == spot_fallback.SPOT_ONLY_MESSAGE
    assert spot_fallback.fallback_error("on_demand", None) is None


def test_the_reason_says_how_long_it_waited_and_what_it_costs_from_now_on():
    text = spot_fallback.reason(1, "3.1")
    assert "within the fallback budget (1 minute)" in text and "on-demand price ($3.1/GPU-hour) from now on" in text
