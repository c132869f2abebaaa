"""Placements that ended because something around the command failed, not the command.

The agent names such a failure in its exit report (`failure`, one of
nodeagent.protocol.PREPARATION_FAILURES): the training script could not be downloaded, the
image could not be pulled, the environment could not be prepared, or the output could not be
uploaded. The job's status reason then says that, with the agent's own words, instead of a
verdict on an exit code the command never produced. Plain functions over plain data.
"""

from __future__ import annotations

from typing import Protocol

from ..recovery.faults import Decision, Verdict


def preparation_decision(failure: str, message: str, node_name: str, exit_code: int | None, signal: int | None) -> Decision | None:
    """The verdict on a placement the agent reported with `failure`; None when the command's
    own exit is what to judge (no failure, or a failed command whose upload failed too)."""
    if not failure:
        return None
    detail = _sentence(message) or "no detail given"
    if failure == "image_pull":
        return Decision(Verdict.IMAGE, message or f"image pull failed on {node_name}")
    if failure == "output_upload":
        if exit_code != 0 or signal:
            return None  # the command failed first; the upload error is in the log stream
        return Decision(Verdict.USER, f"output upload failed on {node_name}: {detail}; the command itself exited with code 0")
    return Decision(Verdict.USER, f"preparation failed on {node_name}: {detail}")


class StoredPlacement(Protocol):
    """What placement_decision reads of a jobs.models.Placement."""

    failure: str
    message: str
    node_name: str
    exit_code: int | None
    exit_signal: int | None


def placement_decision(placement: StoredPlacement) -> Decision | None:
    """preparation_decision for a stored Placement (jobs.models.Placement)."""
    return preparation_decision(placement.failure, placement.message, placement.node_name,
                                placement.exit_code, placement.exit_signal)


def _sentence(text: str) -> str:
    """The agent's sentence, continued after a colon: lowercase first letter, no final period."""
    text = text.strip().rstrip(".")
    if text[:1].isupper() and not text[1:2].isupper():  # "Could not …" yes, "OUTPUT_DIR …" no
        text = text[0].lower() + text[1:]
    return text
