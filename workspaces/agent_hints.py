"""The warm-pool part of the desired state an agent receives (protocol.Placement.warm_pool)."""

from __future__ import annotations

from jobs.models import Placement
from nodeagent import protocol


def add_warm_pool_hints(placements: list[protocol.Placement]) -> list[protocol.Placement]:
    """Tell each placement's agent under which key to keep its prepared environment, for how
    long after it ends, and whether to reuse one kept for an earlier job (one query)."""
    if not placements:
        return placements
    # by job, matched here: hundreds of nodes' placements at once would be a long OR to plan
    rows = Placement.objects.filter(attempt__job_id__any={p["job_id"] for p in placements}).values_list(
        "attempt__job_id", "attempt__number", "role", "attempt__job__owner_id", "attempt__job__keep_alive_minutes",
        "warm_start__source_job_id",
    )
    hints = {
        (job, attempt, role): protocol.WarmPool(owner=owner, keep_alive_seconds=keep * 60, reuse_from_job=source)
        for job, attempt, role, owner, keep, source in rows
    }
    for p in placements:
        hint = hints.get((p["job_id"], p["attempt"], p["role"]))
        if hint is not None:
            p["warm_pool"] = hint
    return placements
