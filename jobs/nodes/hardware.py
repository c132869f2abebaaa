"""What happens to a node's hardware: faults its agent reports (the failover decision reads
them) or is asked to simulate, and the provider reclaiming a spot node."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from console.lib import live
from nodeagent import protocol
from nodeagent.protocol_checks import MAX_INT, MAX_SMALLINT

from .. import actions
from ..channel.notify import node_group
from ..choices import JobStatus
from ..models import HardwareEvent, NodeGPU, Placement, TrainingJob
from ..models.attempts import HOLDING_STATES
from ..recovery import failover

log = logging.getLogger(__name__)


def record_fault(node_id: int, event: dict[str, Any]) -> HardwareEvent:
    """Store hardware evidence from an agent; the failover decision reads it."""
    occurred = datetime.fromtimestamp(float(event.get("ts") or timezone.now().timestamp()), tz=UTC)
    row = HardwareEvent.objects.create(
        node_id=node_id, gpu_index=event.get("gpu_index"), kind=str(event.get("kind", ""))[:32],
        xid=event.get("xid"), detail=str(event.get("detail", ""))[:500], occurred_at=occurred,
    )
    if row.kind == "gpu_lost" and row.gpu_index is not None:
        NodeGPU.objects.filter(node_id=node_id, index=row.gpu_index).update(healthy=False)
    log.warning("hardware fault on node %s: %s", node_id, row)
    return row


def inject_fault(node_id: int, kind: str, gpu_index: int | None, xid: int | None = None, detail: str = "") -> None:
    """Ask a node's agent to make one of its simulated GPUs fail (tests, staff, the API)."""

    if kind not in protocol.FAULT_KINDS:
        raise ValueError(f"unknown fault kind {kind!r} (known: {', '.join(protocol.FAULT_KINDS)})")
    if kind == "xid" and xid is None:
        raise ValueError("an XID fault needs its XID number")
    if xid is not None and not 1 <= xid <= MAX_INT:
        raise ValueError(f"an XID is a number from 1 to {MAX_INT}")
    if gpu_index is not None and not 0 <= gpu_index <= MAX_SMALLINT:
        raise ValueError(f"a GPU index is a number from 0 to {MAX_SMALLINT}")
    message = protocol.InjectFault(type="inject_fault", gpu_index=gpu_index, kind=kind, xid=xid, detail=detail)
    live.publish(node_group(node_id), {"type": "node.inject", "message": message})


@transaction.atomic
def reclaim_from_spot(node_id: int, reason: str) -> int:
    """Interrupt the spot jobs running on a node and cordon it so none lands there again."""
    actions.set_cordon(node_id, True, reason)
    job_ids = set(Placement.objects.filter(
        node_id=node_id, state__in=HOLDING_STATES, attempt__job__learning_type="spot",
        attempt__job__on_demand_since__isnull=True,  # fallen back: it runs on on-demand capacity
        attempt__job__status__in=[JobStatus.CREATING, JobStatus.RUNNING],
    ).values_list("attempt__job_id", flat=True))
    for job in TrainingJob.objects.select_for_update().filter(pk__in=job_ids):
        failover.pause_spot(job, reason)
    return len(job_ids)
