"""Price arithmetic (workspaces.pricing) against hand-computed cases: plain data, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from workspaces.pricing import (
    Span,
    contract_rate,
    cost_by_month,
    discount_percent,
    gpu_hours,
    hourly_estimate,
    lost_tail_seconds,
    money,
    span_cost,
    split_by_month,
    total_cost,
    workspace_estimate,
)

G2 = Decimal("3.1000")  # on-demand $/GPU-hour of g2 (seeded)
G2_SPOT = Decimal("1.2400")
T0 = datetime(2026, 11, 10, 10, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_money_rounds_half_up_to_the_cent():
    assert money(Decimal("1.005")) == Decimal("1.01")
    assert money(Decimal("1.004999")) == Decimal("1.00")
    assert money(Decimal("-0.005")) == Decimal("-0.01")


def test_the_hourly_estimate_of_a_job_holds_every_gpu_it_asked_for():
    assert hourly_estimate(G2, 8, 2) == Decimal("49.60")  # 16 GPUs × $3.10


@pytest.mark.parametrize(("discount", "rate"), [
    ("0", "3.1000"), ("10", "2.7900"), ("20", "2.4800"), ("30", "2.1700"), ("40", "1.8600"), ("100", "0.0000"),
    ("33.33", "2.0668"),  # 3.1 × 0.6667 = 2.06677 → 2.0668 (4 decimals, half up)
])
def test_the_contract_rate_is_the_on_demand_price_less_the_discount(discount, rate):
    assert contract_rate(G2, Decimal(discount)) == Decimal(rate)


def test_a_discount_outside_0_to_100_percent_is_refused():
    with pytest.raises(ValueError, match="0 to 100"):
        contract_rate(G2, Decimal("120"))


def test_the_spot_discount_in_percent():
    assert discount_percent(G2, G2_SPOT) == Decimal("60.0")
    assert discount_percent(Decimal(0), Decimal(0)) == Decimal(0)


def test_a_workspace_estimate_per_hour_month_and_contract():
    # 2 nodes × 8 GPUs at the 3-month rate $2.48: $39.68 an hour, × 730 h = $28,966.40 a month
    estimate = workspace_estimate(Decimal("2.4800"), 8, 2, 3)
    assert estimate.hourly == Decimal("39.68")
    assert estimate.monthly == Decimal("28966.40")
    assert estimate.contract_total == Decimal("86899.20")


def test_the_contract_total_rounds_once_not_month_by_month():
    # 1 GPU at $0.0001 an hour: a month is $0.073 (shown $0.07), 12 months $0.876 → $0.88, not 12 × $0.07
    estimate = workspace_estimate(Decimal("0.0001"), 1, 1, 12)
    assert estimate.monthly == Decimal("0.07")
    assert estimate.contract_total == Decimal("0.88")


def test_gpu_hours_of_gpus_held_for_seconds():
    assert gpu_hours(5400, 8) == Decimal(12)  # 1.5 h × 8 GPUs
    assert gpu_hours(0.5, 1) == Decimal("0.5") / 3600


def test_an_on_demand_job_is_charged_for_what_its_placements_held():
    # 2 nodes × 8 GPUs from 10:00 to 11:30: 24 GPU-hours × $3.10 = $74.40
    spans = [Span(at(0), at(90), 8, G2), Span(at(0), at(90), 8, G2)]
    cost = total_cost(spans)
    assert cost.charged_gpu_hours == Decimal(24)
    assert money(cost.amount) == Decimal("74.40")
    assert cost.lost_gpu_hours == 0 and cost.credited == 0


def test_a_spot_job_is_charged_at_the_spot_price():
    # 1 node × 4 GPUs for 45 minutes at $1.24: 3 GPU-hours = $3.72
    assert money(span_cost(Span(at(0), at(45), 4, G2_SPOT)).amount) == Decimal("3.72")


def test_a_span_that_ends_before_it_starts_costs_nothing():
    assert span_cost(Span(at(10), at(0), 8, G2)).amount == 0


def test_the_lost_tail_is_what_is_left_of_the_lost_time_after_the_gap():
    # 10 min of work redone + 5 min waiting for new nodes = 15 min lost; the gap held no node
    assert lost_tail_seconds(900, 300, 3600) == 600
    # never more than the interrupted attempt ran, never negative
    assert lost_tail_seconds(900, 0, 120) == 120
    assert lost_tail_seconds(200, 300, 3600) == 0
    assert lost_tail_seconds(900, -5, 3600) == 900


def test_a_failover_does_not_charge_the_redone_work_nor_the_wait():
    """Attempt 1: 2 nodes × 8 GPUs, 10:00–11:00, a GPU fault; the newest checkpoint was at 10:50.
    Attempt 2 ran on healthy nodes from 11:05 to 12:05 (lost_seconds = 15 min: 10 redone + 5 waited).

    Charged: 16 GPUs × 50 min + 16 GPUs × 60 min = 13.3333 + 16 = 29.3333 GPU-hours × $3.10 = $90.93.
    Not charged: 16 GPUs × 10 min = 2.6667 GPU-hours ($8.27); the 5-minute gap held nothing."""
    tail = lost_tail_seconds(900, 300, 3600)
    spans = [
        Span(at(0), at(60), 8, G2, tail), Span(at(0), at(60), 8, G2, tail),
        Span(at(65), at(125), 8, G2), Span(at(65), at(125), 8, G2),
    ]
    cost = total_cost(spans)
    assert cost.charged_gpu_hours.quantize(Decimal("0.0001")) == Decimal("29.3333")
    assert money(cost.amount) == Decimal("90.93")
    assert cost.lost_gpu_hours.quantize(Decimal("0.0001")) == Decimal("2.6667")
    assert money(cost.credited) == Decimal("8.27")
    assert cost.run_gpu_hours == Decimal(32)  # held: 16 GPUs × 2 h


def test_a_spot_interruption_does_not_charge_the_work_after_the_last_checkpoint():
    """A spot job on 1 node × 8 GPUs ran 10:00–10:40 and was interrupted; its last checkpoint was
    at 10:30. It resumed at 11:00 and ran to 11:20 (lost_seconds = 30 min: 10 redone + 20 waited).

    Charged: 8 × 30 min + 8 × 20 min = 6.6667 GPU-hours × $1.24 = $8.27; 8 × 10 min = 1.3333 GPU-h not."""
    tail = lost_tail_seconds(1800, 1200, 2400)
    assert tail == 600
    cost = total_cost([Span(at(0), at(40), 8, G2_SPOT, tail), Span(at(60), at(80), 8, G2_SPOT)])
    assert money(cost.amount) == Decimal("8.27")
    assert cost.lost_gpu_hours.quantize(Decimal("0.0001")) == Decimal("1.3333")


def test_a_span_across_months_is_cut_at_midnight_of_the_first():
    span = Span(datetime(2026, 10, 31, 23, 0, tzinfo=UTC), datetime(2026, 11, 1, 2, 0, tzinfo=UTC), 8, G2)
    pieces = split_by_month(span, UTC)
    assert [(month, piece.seconds) for month, piece in pieces] == [("2026-10", 3600), ("2026-11", 7200)]
    months = cost_by_month([span], UTC)
    assert money(months["2026-10"].amount) == Decimal("24.80")
    assert money(months["2026-11"].amount) == Decimal("49.60")


def test_months_follow_the_time_zone_of_the_console():
    # 23:30 UTC on Oct 31 is already November in Seoul
    span = Span(datetime(2026, 10, 31, 23, 30, tzinfo=UTC), datetime(2026, 10, 31, 23, 45, tzinfo=UTC), 1, G2)
    assert list(cost_by_month([span], ZoneInfo("Asia/Seoul"))) == ["2026-11"]
    assert list(cost_by_month([span], UTC)) == ["2026-10"]


def test_the_lost_tail_stays_in_the_month_it_fell_in():
    # 23:00 Oct 31 → 02:00 Nov 1, the last 90 minutes lost: October is charged in full, November 30 min
    span = Span(datetime(2026, 10, 31, 23, 0, tzinfo=UTC), datetime(2026, 11, 1, 2, 0, tzinfo=UTC), 1, G2, 5400)
    months = cost_by_month([span], UTC)
    assert months["2026-10"].charged_gpu_hours == 1 and months["2026-10"].lost_gpu_hours == 0
    assert months["2026-11"].charged_gpu_hours == Decimal("0.5") and months["2026-11"].lost_gpu_hours == Decimal("1.5")
    assert sum(m.amount for m in months.values()) == span_cost(span).amount


def test_a_year_long_reservation_is_split_into_twelve_months():
    span = Span(datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC), 8, Decimal("1.8600"))
    months = cost_by_month([span], UTC)
    assert len(months) == 12
    assert months["2026-02"].charged_gpu_hours == 28 * 24 * 8
    assert sum(m.amount for m in months.values()) == Decimal("1.8600") * 365 * 24 * 8
