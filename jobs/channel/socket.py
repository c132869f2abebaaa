"""What every socket that speaks the agent protocol does with a message before its handler.

Node agents (jobs.channel.consumer) and Slurm step launchers (jobs.slurm.consumer) share it: each
message is checked against the protocol (nodeagent.protocol_checks) and handled alone. A frame
may carry one message (a JSON object) or several in order (a JSON array, nodeagent.protocol
"Frames"): each element is checked and handled exactly as if it had come in a frame of its own;
an array that is not 1 to 64 objects is refused whole.

- malformed, out of range, or a write the sender may not make: refused — an `error` naming it,
  then `ack` (the sender drops it), and a copy for staff (RejectedAgentMessage); never a 1011;
- the console's database is away: `error` with `retry` and close 4503, nothing acknowledged —
  the sender keeps its messages and its jobs, and reconnects later.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from channels.consumer import get_handler_name
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer

from nodeagent import protocol
from nodeagent.protocol_checks import Invalid, acknowledgeable, check, check_frame

from ..models import RejectedAgentMessage
from .db import OUTAGE_ERRORS, agent_db
from .writes import RefusedWrite

log = logging.getLogger(__name__)
MAX_KEPT_BODY = 65_536


def bearer_token(scope) -> str:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


def _keep(node_id: int | None, sender: str, message: Any, raw: str, reason: str) -> None:
    kind = message.get("type") if isinstance(message, dict) else None
    if not raw:  # a message of a batched frame: its own text was never needed until now
        raw = json.dumps(message)[:MAX_KEPT_BODY]
    RejectedAgentMessage.objects.create(
        node_id=node_id, node_name=sender[:63], msg_type=str(kind or "")[:40], msg_id=acknowledgeable(message),
        reason=reason[:500], body=raw[:MAX_KEPT_BODY],
    )


class ProtocolConsumer(AsyncWebsocketConsumer):
    """Subclasses set `accepting` once the sender is authenticated, and implement `handle`."""

    accepting = False
    node_id: int | None = None  # the registry's node, when the sender is one
    sender = ""  # who speaks, for logs and staff

    async def dispatch(self, message: dict) -> None:
        """As Channels' own, without closing old database connections before every message: that
        is a trip to Channels' one database thread per message (a fleet's heartbeats queued on
        it), and these sockets use none of its connections (their calls run on jobs.channel.db's)."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"no handler for message type {message['type']}")
        await handler(message)

    async def handle(self, message: dict, raw: str) -> None:
        """Handle one checked message (`raw`: its text, kept for staff if it is refused later;
        empty for a message of a batched frame, whose text is made only if it is refused)."""
        raise NotImplementedError

    async def send_json(self, content: dict) -> None:
        await self.send(text_data=json.dumps(content))

    async def refuse(self, message: str, code: int = protocol.CLOSE_BAD_TOKEN) -> None:
        self.accepting = False
        await self.send_json(protocol.Error(type="error", message=message))
        await self.close(code=code)

    async def degraded(self, why: str) -> None:
        """The console is up but cannot serve: the sender keeps everything and comes back later."""
        log.warning("connection of %s: %s; asked it to retry", self.sender or "an agent", why)
        self.accepting = False  # what follows on this connection is sent again on the next
        await self.send_json(protocol.Error(type="error", message=f"{why}; keep running and retry", retry=True))
        await self.close(code=protocol.CLOSE_TRY_AGAIN)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not self.accepting:
            return
        raw = text_data if text_data is not None else ""
        decoded: Any = None
        try:
            if bytes_data is not None:
                raise Invalid("binary frames are not part of the agent protocol")
            decoded = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # Invalid, or not JSON at all
            await self.reject(decoded, raw or repr(bytes_data)[:MAX_KEPT_BODY], f"malformed message: {exc}")
            return
        if not isinstance(decoded, list):
            await self._one(decoded, raw)
            return
        try:
            check_frame(decoded)
        except Invalid as exc:  # refused whole, acknowledged up to its highest msg_id
            await self.refused(decoded, raw, f"malformed message: {exc}")
            return
        # a batched frame: its messages in order, each as if alone (a refused one costs only itself);
        # a close or an outage on the way stops the rest, which the agent sends again
        for message in decoded:
            if not self.accepting:
                return
            await self._one(message, "")

    async def _one(self, message: Any, raw: str) -> None:
        try:
            check(message)
        except (ValueError, RecursionError) as exc:
            await self.refused(message, raw, f"malformed message: {exc}")
            return
        try:
            await self.handle(message, raw)
        except RefusedWrite as refused:
            await self.refused(message, raw, str(refused))
        except StopConsumer:
            raise
        except OUTAGE_ERRORS:
            await self.degraded("the console cannot reach its database")
        except Exception as exc:  # a message this console cannot store must not jam the sender
            log.exception("could not handle a %s message of %s", message.get("type"), self.sender)
            await self.refused(message, raw, f"the console could not store this message ({type(exc).__name__}: {exc})")

    async def refused(self, message: Any, raw: str, reason: str) -> None:
        """A message was refused before it was stored: answer it. A subclass that stores
        messages later answers it in order with them (its ack must not cover one not yet stored)."""
        await self.reject(message, raw, reason)

    async def reject(self, message: Any, raw: str, reason: str) -> None:
        msg_id = acknowledgeable(message)
        log.warning("refused a message of %s (msg_id %s): %s", self.sender or "an agent", msg_id, reason[:300])
        error = protocol.Error(type="error", message=reason)
        if msg_id is not None:
            error["msg_id"] = msg_id
        await self.send_json(error)
        try:
            await agent_db(_keep)(self.node_id, self.sender, message, raw, reason)
        except Exception:
            log.warning("could not keep the refused message for staff", exc_info=True)
        if msg_id is not None and self.sender:
            await self.send_json(protocol.Ack(type="ack", upto=msg_id))
