"""Storing an agent's queued messages in one trip to the agents' thread pool.

A node sends its messages in order and the console handles them in order, so a busy node's
messages used to wait for each other: each took its own turn in the pool, behind every other
node's. Its consumer (jobs.agent_consumer) now hands over all that have arrived meanwhile, and
this stores them one after another, each in its own transaction as before (a refused or failed
one costs only itself), and says what became of each, so one cumulative `ack` covers the batch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from monitoring import ingest, metrics_ingest

from . import lifecycle
from .agent_db import OUTAGE_ERRORS, call_with_retries
from .agent_writes import RefusedWrite
from .nodes import registry

log = logging.getLogger(__name__)
STORED_KINDS = frozenset({"logs", "attempt", "metrics", "fault", "checkpoint"})


@dataclass(frozen=True)
class Outcome:
    stored: bool
    refusal: str = ""  # why it was refused (the sender drops it; staff keep a copy)
    outage: bool = False  # the database is away: this one and those after it were not stored


STORED = Outcome(True)
OUTAGE = Outcome(False, outage=True)


def store_message(node_id: int, message: dict) -> None:
    """Store one checked message of node `node_id` (a kind in STORED_KINDS)."""
    kind = message["type"]
    if kind == "logs":
        ingest.store_batch(message, node_id)
    elif kind == "attempt":
        report = lifecycle.PlacementReport(
            job_id=message["job_id"],
            attempt=message["attempt"],
            role=message["role"],
            state=message["state"],
            exit_code=message.get("exit_code"),
            signal=message.get("signal"),
            output_url=message.get("output_url", ""),
            message=message.get("message", ""),
            image_error=bool(message.get("image_error")),
            failure=message.get("failure", ""),
        )
        if lifecycle.record_placement(report, node_id) == "stale":
            log.info("ignored %s of superseded attempt %s/%s", message["state"], message["job_id"], message["attempt"])
    elif kind == "metrics":
        metrics_ingest.store_metrics(node_id, message)
    elif kind == "fault":
        registry.record_fault(node_id, message)
    elif kind == "checkpoint":
        lifecycle.record_checkpoint(
            message["job_id"],
            message["attempt"],
            message["step"],
            message["url"],
            node_id,
            message["role"],
        )
    else:
        raise ValueError(f"not a stored message: {kind!r}")


def subsumes(first: dict, second: dict) -> bool:
    """`second` leaves the rows exactly as storing `first` and then `second` would: a placement's
    `preparing` report followed by its `running` (the placement runs, started when first
    stored). A backlog brings the two together; one transaction stores them."""
    return (
        first["type"] == second["type"] == "attempt" and first["state"] == "preparing" and second["state"] == "running"
        and all(first[field] == second[field] for field in ("job_id", "attempt", "role"))
    )


def store_messages(node_id: int, messages: list[dict], sender: str = "") -> list[Outcome]:
    """Store `messages` in order; one outcome each, up to an outage (the rest wait for a resend).
    A message the next one subsumes shares its outcome (it would have been refused alike)."""
    outcomes: list[Outcome] = []
    index = 0
    while index < len(messages):
        covered = 2 if index + 1 < len(messages) and subsumes(messages[index], messages[index + 1]) else 1
        outcome = _store_one(node_id, messages[index + covered - 1], sender)
        outcomes.extend([outcome] * covered)
        if outcome.outage:
            break
        index += covered
    return outcomes


def _store_one(node_id: int, message: dict, sender: str) -> Outcome:
    try:
        call_with_retries(store_message, node_id, message)
    except RefusedWrite as refused:
        return Outcome(False, refusal=str(refused))
    except OUTAGE_ERRORS:
        return OUTAGE
    except Exception as exc:  # a message this console cannot store must not jam the sender
        log.exception("could not handle a %s message of %s", message.get("type"), sender or f"node {node_id}")
        return Outcome(False, refusal=f"the console could not store this message ({type(exc).__name__}: {exc})")
    return STORED
