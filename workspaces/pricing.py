"""Price arithmetic: plain functions over plain numbers and times (no Django, no database).

Money is Decimal throughout. Amounts are kept exact while they are summed and rounded to the
cent (half up) only when shown, so the total of a month equals the rounded sum of its exact
parts, not the sum of rounded parts.

What is charged:
- a job, for every second each of its placements held its GPUs (Placement started_at →
  ended_at), at its plan's price per GPU-hour; the part of an interrupted attempt whose work
  had to be redone after a failover or a spot interruption (the *lost tail*) is not charged;
  the time a job waits between attempts is not charged either (no placement holds nodes);
- a Training Workspace, for every second each of its nodes is reserved, at its contract rate
  (the on-demand price less the discount of its contract period), whether jobs run or not;
  jobs inside a workspace are covered by it and cost nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")
RATE = Decimal("0.0001")  # prices per GPU-hour are stored with 4 decimals
HOURS_PER_MONTH = Decimal(730)  # 365 × 24 / 12: the usual cloud billing month
SECONDS_PER_HOUR = Decimal(3600)


def money(amount: Decimal) -> Decimal:
    """Round to the cent, half up (what an invoice shows)."""
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def hourly_estimate(price_per_gpu_hour: Decimal, gpus_per_node: int, node_count: int) -> Decimal:
    """Estimated price of one hour of a job that holds every GPU it asked for."""
    return money(price_per_gpu_hour * gpus_per_node * node_count)


def discount_percent(full: Decimal, discounted: Decimal) -> Decimal:
    """How much cheaper `discounted` is than `full`, in percent (e.g. the spot discount)."""
    if full <= 0:
        return Decimal(0)
    return ((full - discounted) / full * 100).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)


def contract_rate(on_demand_per_gpu_hour: Decimal, discount: Decimal) -> Decimal:
    """A workspace's price per GPU-hour: the on-demand price less its contract discount (%)."""
    if not Decimal(0) <= discount <= Decimal(100):
        raise ValueError(f"a discount is 0 to 100 percent, not {discount}")
    return (on_demand_per_gpu_hour * (Decimal(100) - discount) / Decimal(100)).quantize(RATE, rounding=ROUND_HALF_UP)


@dataclass(frozen=True)
class WorkspaceEstimate:
    rate_per_gpu_hour: Decimal  # after the contract discount
    hourly: Decimal  # every reserved GPU for one hour
    monthly: Decimal  # one billing month (730 h)
    contract_total: Decimal  # the whole contract period


def workspace_estimate(rate_per_gpu_hour: Decimal, gpus_per_node: int, node_count: int, months: int) -> WorkspaceEstimate:
    """The estimated billing amount of a workspace, as the creation summary shows it."""
    hourly = rate_per_gpu_hour * gpus_per_node * node_count
    monthly = hourly * HOURS_PER_MONTH
    return WorkspaceEstimate(rate_per_gpu_hour, money(hourly), money(monthly), money(monthly * months))


def gpu_hours(seconds: Decimal | float, gpus: int) -> Decimal:
    """Exact GPU-hours of `gpus` GPUs held for `seconds` (microsecond precision)."""
    return Decimal(str(round(float(seconds), 6))) * gpus / SECONDS_PER_HOUR


def lost_tail_seconds(lost_seconds: float, gap_seconds: float, run_seconds: float) -> float:
    """Seconds at the end of an interrupted attempt whose work was redone (not charged).

    `lost_seconds` (JobAttempt.lost_seconds of the *next* attempt) measures from the newest
    checkpoint (or the interrupted attempt's start) to the moment the next attempt ran: the
    redone tail of the interrupted attempt plus the gap between the two. The gap held no
    nodes, so only what is left of it after the gap is credited, and never more than the
    interrupted attempt ran.
    """
    return max(0.0, min(lost_seconds - max(gap_seconds, 0.0), run_seconds))


@dataclass(frozen=True)
class Span:
    """GPUs held from `start` to `end`; the last `lost_seconds` of it are not charged."""

    start: datetime
    end: datetime
    gpus: int
    price_per_gpu_hour: Decimal
    lost_seconds: float = 0.0

    @property
    def seconds(self) -> float:
        return max(0.0, (self.end - self.start).total_seconds())

    @property
    def charged_end(self) -> datetime:
        return max(self.start, self.end - timedelta(seconds=min(self.lost_seconds, self.seconds)))


@dataclass(frozen=True)
class Cost:
    """What a set of spans comes to; amounts are exact (round with `money` to show them)."""

    run_gpu_hours: Decimal = Decimal(0)  # everything the GPUs were held
    lost_gpu_hours: Decimal = Decimal(0)  # of which redone after an interruption: not charged
    charged_gpu_hours: Decimal = Decimal(0)
    amount: Decimal = Decimal(0)
    credited: Decimal = Decimal(0)  # what the lost GPU-hours would have cost

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.run_gpu_hours + other.run_gpu_hours, self.lost_gpu_hours + other.lost_gpu_hours,
            self.charged_gpu_hours + other.charged_gpu_hours, self.amount + other.amount,
            self.credited + other.credited,
        )


def span_cost(span: Span) -> Cost:
    run = gpu_hours(span.seconds, span.gpus)
    charged = gpu_hours((span.charged_end - span.start).total_seconds(), span.gpus)
    lost = run - charged
    return Cost(run, lost, charged, charged * span.price_per_gpu_hour, lost * span.price_per_gpu_hour)


def total_cost(spans: Iterable[Span]) -> Cost:
    total = Cost()
    for span in spans:
        total += span_cost(span)
    return total


def month_of(moment: datetime, tz: tzinfo) -> str:
    return moment.astimezone(tz).strftime("%Y-%m")


def _next_month_start(moment: datetime, tz: tzinfo) -> datetime:
    local = moment.astimezone(tz)
    year, month = (local.year + 1, 1) if local.month == 12 else (local.year, local.month + 1)
    return datetime(year, month, 1, tzinfo=tz)


def split_by_month(span: Span, tz: tzinfo) -> list[tuple[str, Span]]:
    """Cut a span at month boundaries (in `tz`); the lost tail stays with the month it fell in."""
    pieces: list[tuple[str, Span]] = []
    start, charged_end = span.start, span.charged_end
    while start < span.end:
        end = min(span.end, _next_month_start(start, tz))
        lost = (end - max(start, charged_end)).total_seconds() if end > charged_end else 0.0
        pieces.append((month_of(start, tz), Span(start, end, span.gpus, span.price_per_gpu_hour, lost)))
        start = end
    return pieces


def cost_by_month(spans: Iterable[Span], tz: tzinfo) -> dict[str, Cost]:
    months: dict[str, Cost] = {}
    for span in spans:
        for month, piece in split_by_month(span, tz):
            months[month] = months.get(month, Cost()) + span_cost(piece)
    return dict(sorted(months.items()))
