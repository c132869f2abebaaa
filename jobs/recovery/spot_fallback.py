"""Spot with a deadline (plain arithmetic, no Django): a spot job may carry a fallback budget,
`spot_fallback_after_minutes`. Interrupted and not resumed within it, the job resumes on
on-demand capacity: from then on it is placed, kept (never preempted) and billed as on-demand.
The scheduler run asks `due` of each interrupted spot job it sees (jobs.scheduling.scheduler_run)."""

from __future__ import annotations

from datetime import datetime, timedelta

# a week: a longer wait is no deadline (leave the budget out to wait for spot capacity forever)
MAX_FALLBACK_MINUTES = 7 * 24 * 60
FALLBACK_MESSAGE = f"Enter a whole number of minutes from 0 to {MAX_FALLBACK_MINUTES}, or leave it blank (wait for spot capacity)."
SPOT_ONLY_MESSAGE = "Only a Spot Training job falls back to on-demand capacity: leave it blank for On-Demand."


def fallback_error(learning_type: object, minutes: object) -> str | None:
    """Why `minutes` is not a fallback budget for a job of `learning_type`, or None (blank: none)."""
    if minutes is None or minutes == "":
        return None
    if isinstance(minutes, bool) or not isinstance(minutes, int) or not 0 <= minutes <= MAX_FALLBACK_MINUTES:
        return FALLBACK_MESSAGE
    if learning_type != "spot":
        return SPOT_ONLY_MESSAGE
    return None


def deadline(interrupted_at: datetime, budget_minutes: int) -> datetime:
    """When an interrupted spot job falls back to on-demand capacity if it has not resumed."""
    return interrupted_at + timedelta(minutes=budget_minutes)


def due(interrupted_at: datetime | None, budget_minutes: int | None, now: datetime) -> bool:
    """Whether a spot job waiting since `interrupted_at` falls back now (no budget: never)."""
    if budget_minutes is None or interrupted_at is None:
        return False
    return now >= deadline(interrupted_at, budget_minutes)


def reason(budget_minutes: int, price: str) -> str:
    """What the job's history and attempts timeline say when it falls back."""
    waited = f"{budget_minutes} minute{'s' if budget_minutes != 1 else ''}"
    return (f"Spot capacity did not return within the fallback budget ({waited}): resuming on on-demand "
            f"capacity from its newest checkpoint, billed at the on-demand price (${price}/GPU-hour) from now on")
