"""Price arithmetic: plain functions over plain numbers."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")


def hourly_estimate(price_per_gpu_hour: Decimal, gpus_per_node: int, node_count: int) -> Decimal:
    """Estimated price of one hour of a job that holds every GPU it asked for."""
    return (price_per_gpu_hour * gpus_per_node * node_count).quantize(CENT, rounding=ROUND_HALF_UP)
