"""Why did a training process stop? Hardware, infrastructure, image, or the user's own code.

Plain functions over plain data (the table of ../shared/reference/fault-classification.md),
checked in the reference's order. The console's failover and spot logic act on the verdict.
"""

from __future__ import annotations

import re
import signal as signals
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

# XIDs that mean the GPU is broken (reset or replacement needed): fail over.
FATAL_XIDS = frozenset({46, 48, 62, 64, 74, 79, 95, 119, 120, 136, 140, 143, 144, 145, 146, 147, 148, 149, 150, 155, 156, 158})
CONTAINED_XIDS = frozenset({94})  # contained memory error: retry, counted
DEGRADING_XIDS = frozenset({63, 92})  # pending remap / high single-bit rate: drain once idle
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})  # caused by the program, not the GPU

# in a job's output these only ask for a recheck of the agent's evidence (see classify)
HARDWARE_LOG_PATTERNS = (re.compile(r"uncorrectable ECC error encountered", re.I),)
# A rank that lost its peers fails with one of these; the peer's node decides who is to blame.
PEER_FAILURE_PATTERNS = (
    re.compile(r"Connection (closed|reset) by peer|DistNetworkError|RendezvousClosedError|"
               r"gloo/transport|NCCL (error|communicator was aborted)|ProcessGroupGloo|watchdog caught collective", re.I),
)
USER_LOG_PATTERNS = (
    (re.compile(r"CUDA out of memory", re.I), "CUDA out of memory"),
    (re.compile(r"command not found|No such file or directory", re.I), "command not found"),
    (re.compile(r"^Traceback \(most recent call last\):"), "a Python exception"),
)


class Verdict(StrEnum):
    SUCCESS = "success"
    IMAGE = "image"  # Pending - imagepullbackoff, no retry
    HARDWARE = "hardware"  # cordon the node, fail over, count it
    INFRA = "infra"  # the node is gone: fail over
    USER = "user"  # Pending - internalerror, no retry
    AMBIGUOUS = "ambiguous"  # killed by a signal without evidence: look again in a few seconds


@dataclass(frozen=True)
class HardwareEvent:
    """One piece of hardware evidence an agent reported (see nodeagent.faults)."""

    kind: str  # xid | ecc_uncorrected | row_remap_pending | row_remap_failure | nvlink | gpu_lost | gpu_missing | recovery_action
    gpu_index: int | None = None
    xid: int | None = None
    detail: str = ""

    def describe(self) -> str:
        where = f"GPU {self.gpu_index}" if self.gpu_index is not None else "the node"
        name = f"XID {self.xid}" if self.kind == "xid" else self.kind.replace("_", " ")
        return f"{name} on {where}" + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True)
class ExitEvidence:
    exit_code: int | None = None
    signal: int | None = None
    image_error: bool = False
    image_message: str = ""
    node_lost: bool = False
    lost_how: str = ""  # how the lost node went, when known ("its agent shut down", …)
    agent_restarted: bool = False  # the node's agent came back without this placement (restart, replaced)
    node_name: str = ""
    log_tail: tuple[str, ...] = ()
    hardware: tuple[HardwareEvent, ...] = ()
    peers_down: tuple[str, ...] = ()  # other nodes of the attempt that are disconnected or lost


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    evidence: tuple[str, ...] = field(default_factory=tuple)


def is_hardware_fault(event: HardwareEvent) -> bool:
    """Evidence that the node cannot train any more (XID 63/92 and application XIDs are not)."""
    if event.kind == "xid":
        return event.xid in FATAL_XIDS or event.xid in CONTAINED_XIDS
    return event.kind in {"ecc_uncorrected", "row_remap_pending", "row_remap_failure", "nvlink", "gpu_lost", "gpu_missing", "recovery_action"}


def is_degrading(event: HardwareEvent) -> bool:
    return event.kind == "xid" and event.xid in DEGRADING_XIDS


def _signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _first_match(lines: Iterable[str], patterns: Iterable[tuple[re.Pattern[str], str]]) -> str | None:
    for line in lines:
        for pattern, label in patterns:
            if pattern.search(line):
                return label
    return None


def classify(evidence: ExitEvidence) -> Decision:
    """The verdict on one stopped attempt, with the evidence a user will read."""
    if evidence.image_error:
        return Decision(Verdict.IMAGE, evidence.image_message or "the image could not be pulled")
    if evidence.node_lost:
        return Decision(Verdict.INFRA, f"node {evidence.node_name} {evidence.lost_how or 'stopped sending heartbeats'}")
    if evidence.agent_restarted:
        return Decision(Verdict.INFRA, f"the agent of node {evidence.node_name} came back without this placement "
                                       "(it restarted or was replaced): its processes are gone")
    faults = [event for event in evidence.hardware if is_hardware_fault(event)]
    if faults:
        return Decision(Verdict.HARDWARE, "hardware fault: " + "; ".join(e.describe() for e in faults),
                        tuple(e.describe() for e in faults))
    if evidence.exit_code == 0 and not evidence.signal:
        return Decision(Verdict.SUCCESS, "exited with code 0")
    # the job's own output is the user's to write: it can ask for a second look at the agent's
    # evidence (NVML/XID events), never make a hardware verdict — or cordon a shared node
    for line in evidence.log_tail:
        if any(p.search(line) for p in HARDWARE_LOG_PATTERNS):
            return Decision(Verdict.AMBIGUOUS, "the job's output mentions a GPU error; checking the agent's hardware evidence",
                            (line.strip()[:200],))
    if evidence.peers_down:
        return Decision(Verdict.INFRA, f"node {', '.join(evidence.peers_down)} of this job stopped answering")
    if any(p.search(line) for line in evidence.log_tail for p in PEER_FAILURE_PATTERNS):
        return Decision(Verdict.AMBIGUOUS, "a distributed peer failed; checking the other nodes")
    app_xids = [e.describe() for e in evidence.hardware if e.kind == "xid" and e.xid in APPLICATION_XIDS]
    user_cause = _first_match(evidence.log_tail, USER_LOG_PATTERNS)
    if evidence.signal and not user_cause:
        return Decision(Verdict.AMBIGUOUS, f"killed by {_signal_name(evidence.signal)} without hardware evidence")
    if evidence.exit_code == 127 and not user_cause:
        user_cause = "command not found"
    # in the user's words first: what their command did (the status reason opens with it)
    detail = f"the command exited with code {evidence.exit_code}" if evidence.exit_code is not None else "the command was killed"
    if evidence.signal:
        detail = f"the command was killed by {_signal_name(evidence.signal)}"
    if user_cause:
        detail += f" ({user_cause})"
    if app_xids:
        detail += "; application XIDs only: " + ", ".join(app_xids)
    return Decision(Verdict.USER, detail, tuple(app_xids))


def recheck(first: Decision, later_hardware: tuple[HardwareEvent, ...], node_alive: bool, node_name: str,
            peers_down: tuple[str, ...] = ()) -> Decision:
    """An ambiguous stop, looked at again after a few seconds: evidence or a dead node → failover."""
    if first.verdict is not Verdict.AMBIGUOUS:
        return first
    if not node_alive:
        return Decision(Verdict.INFRA, f"{first.reason}; node {node_name} is gone")
    if peers_down:
        return Decision(Verdict.INFRA, f"{first.reason}; node {', '.join(peers_down)} stopped answering")
    faults = [e for e in later_hardware if is_hardware_fault(e)]
    if faults:
        return Decision(Verdict.HARDWARE, "hardware fault: " + "; ".join(e.describe() for e in faults),
                        tuple(e.describe() for e in faults))
    return Decision(Verdict.USER, f"{first.reason}; a second look found no hardware fault")
