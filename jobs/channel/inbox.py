"""Storing agents' queued messages: many nodes' at once, each node's in order.

A node sends its messages in order and the console stores them in order; its consumer
(jobs.channel.consumer) hands over all that arrived meanwhile, and the process's store (jobs.channel.gather)
passes what many nodes handed over to `store_batches` in one call. The nodes that sent only log
lines and placement reports (nearly all of a fleet's traffic) are stored together in one
transaction of a constant number of statements; any other node's messages are stored one after
another, each in its own transaction (a refused or failed one costs only itself). Either way each
message gets an outcome, so one cumulative `ack` answers a node's batch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from monitoring import ingest, metrics_ingest

from .. import lifecycle
from ..nodes import hardware
from .db import OUTAGE_ERRORS, call_with_retries
from .placement_reports import PlacementReport
from .writes import RefusedWrite

log = logging.getLogger(__name__)
STORED_KINDS = frozenset({"logs", "attempt", "metrics", "fault", "checkpoint"})
# what store_batches stores for many nodes in one transaction
TOGETHER_KINDS = frozenset({"logs", "attempt"})


@dataclass(frozen=True)
class Outcome:
    stored: bool
    refusal: str = ""  # why it was refused (the sender drops it; staff keep a copy)
    outage: bool = False  # the database is away: this one and those after it were not stored


STORED = Outcome(True)
OUTAGE = Outcome(False, outage=True)


def store_message(node_id: int, message: dict[str, Any]) -> None:
    """Store one checked message of node `node_id` (a kind in STORED_KINDS)."""
    kind = message["type"]
    if kind == "logs":
        ingest.store_batch(message, node_id)
    elif kind == "attempt":
        if lifecycle.record_placement(_report(message), node_id) == "stale":
            _ignored(message)
    elif kind == "metrics":
        metrics_ingest.store_metrics(node_id, message)
    elif kind == "fault":
        hardware.record_fault(node_id, message)
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


def _report(message: dict[str, Any]) -> PlacementReport:
    return PlacementReport(
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


def _ignored(message: dict[str, Any]) -> None:
    log.info("ignored %s of superseded attempt %s/%s", message["state"], message["job_id"], message["attempt"])


def store_batches(batches: Sequence[tuple[int, list[dict[str, Any]], str]]) -> list[list[Outcome]]:
    """Store several nodes' messages ((node id, its messages in order, sender)); the outcomes of
    each node's, as store_messages gives them.

    The nodes that sent only log lines and placement reports, the bulk of a busy fleet's
    traffic, are stored together in one transaction of a few statements (a transaction per
    message was what held a fleet back); any other node's messages, or all of them should that
    transaction fail for a reason of its own, are stored one by one as before."""
    outcomes: list[list[Outcome] | None] = [None] * len(batches)
    together = [i for i, (_, messages, _) in enumerate(batches) if all(m["type"] in TOGETHER_KINDS for m in messages)]
    if together:
        try:
            stored = call_with_retries(_store_together, [(batches[i][0], batches[i][1]) for i in together])
        except OUTAGE_ERRORS:
            stored = [[OUTAGE] for _ in together]  # the agents keep them and send them again
        except Exception:
            log.exception("could not store %d nodes' messages together; storing them one by one", len(together))
            stored = [store_messages(*batches[i]) for i in together]
        for i, node_outcomes in zip(together, stored, strict=True):
            outcomes[i] = node_outcomes
    return [found if found is not None else store_messages(*batches[i]) for i, found in enumerate(outcomes)]


@transaction.atomic
def _store_together(batches: list[tuple[int, list[dict[str, Any]]]]) -> list[list[Outcome]]:
    lines = [(node_id, m) for node_id, messages in batches for m in messages if m["type"] == "logs"]
    reports = [(node_id, m) for node_id, messages in batches for m in messages if m["type"] == "attempt"]
    # every job these name is locked first, in one order (jobs.lifecycle.record_placements); the
    # lines of a job whose last report ended its deletion go with it, as when stored before it
    verdicts = lifecycle.record_placements([(node_id, _report(m)) for node_id, m in reports],
                                           with_jobs={m["job_id"] for _, m in lines})
    # message (by identity: each was parsed from its own frame) → why it was refused, or ""
    refused = dict(zip((id(m) for _, m in lines), ingest.store_batches(lines), strict=True))
    for (_, m), verdict in zip(reports, verdicts, strict=True):
        refused[id(m)] = verdict.reason if verdict.kind == "refused" else ""
        if verdict.kind == "stale":
            _ignored(m)
    return [[Outcome(False, refusal=refused[id(m)]) if refused[id(m)] else STORED for m in messages] for _, messages in batches]


def subsumes(first: dict[str, Any], second: dict[str, Any]) -> bool:
    """`second` leaves the rows exactly as storing `first` and then `second` would: a placement's
    `preparing` report followed by its `running` (the placement runs, started when first
    stored). A backlog brings the two together; one transaction stores them."""
    return (
        first["type"] == second["type"] == "attempt" and first["state"] == "preparing" and second["state"] == "running"
        and all(first[field] == second[field] for field in ("job_id", "attempt", "role"))
    )


def store_messages(node_id: int, messages: list[dict[str, Any]], sender: str = "") -> list[Outcome]:
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


def _store_one(node_id: int, message: dict[str, Any], sender: str) -> Outcome:
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
