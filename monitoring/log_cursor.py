"""The logs cursor: for each stream of a job, the id of the last line read.

A single row id cannot be a cursor: two agents' batches draw their ids when they insert but
become visible when they commit, so a reader can see id 1,500 before id 1,000 and would skip
1,000 for good. Within one stream, though, ids follow commit order: a trigger (migration
monitoring/0005) makes each insert wait for the stream's previous writer to end before it
draws its id, whoever writes (the agent's batches, a re-sent batch on a new connection, the
console's own lines). So "id above the last one read, per stream" never skips a committed
line; a stream not in the cursor yet is read from its start.

(Ordering a stream by (attempt, seq) would not do: the console writes "[SPOT] Interrupted …"
with a high seq while the command still prints lower seqs in its grace period.)

Clients treat the cursor as opaque text; this module only encodes and decodes it (no Django).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

VERSION = "2"
MAX_ID = 2**63 - 1  # PostgreSQL bigint
MAX_CHARS = 8000  # a few hundred streams; a query string stays well under common URL limits
BAD_CURSOR = "not a cursor this API returned: pass `next` of the previous answer unchanged"

Positions = dict[str, int]  # stream → id of the last line read in it


class BadCursor(ValueError):
    """A cursor this API did not hand out."""


def encode(positions: Positions) -> str:
    body = json.dumps(dict(sorted(positions.items())), separators=(",", ":")).encode()
    return VERSION + "." + base64.urlsafe_b64encode(body).decode().rstrip("=")


def decode(cursor: str) -> Positions:
    version, _, body = cursor.strip().partition(".")
    if version != VERSION or len(cursor) > MAX_CHARS:
        raise BadCursor(BAD_CURSOR)
    try:
        positions = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (binascii.Error, ValueError):
        raise BadCursor(BAD_CURSOR) from None
    if not isinstance(positions, dict) or not all(
        isinstance(name, str) and type(line_id) is int and 0 <= line_id <= MAX_ID
        for name, line_id in positions.items()
    ):
        raise BadCursor(BAD_CURSOR)
    return positions


def advance(positions: Positions, lines: list[dict[str, Any]]) -> Positions:
    """The positions after reading `lines` (each with its stream and id)."""
    moved = dict(positions)
    for line in lines:
        moved[line["stream"]] = max(moved.get(line["stream"], 0), line["id"])
    return moved
