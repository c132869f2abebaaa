"""The one WebSocket to the console: hello, heartbeats, the spool's messages out, orders in.

The loop never gives up on a console that is away (daphne restarting, Redis gone, network
cut): it reconnects with exponential backoff and jitter, and on each new connection sends
`hello`, then every unacknowledged spooled message in msg_id order, then new ones. Only a
refused token ends it (TokenRejected), because retrying cannot fix that.

Each welcome's resume secret is kept in this object only (never on disk: a job must not find it)
and presented in the next hello: it is what lets this process take its node back after a blip
while its old connection still looks alive to the console. A console that finds the node's
connection alive and no secret (another process with the token, or this one restarted after a
silent network cut) refuses the hello with 4423; the loop logs why and retries with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from . import protocol
from .protocol_checks import MAX_FRAME_CHARS, MAX_FRAME_MESSAGES
from .spool import Spool
from .supervisor import Supervisor

log = logging.getLogger(__name__)


class TokenRejected(Exception):
    """The console refused this node's token (error + close 4401, or HTTP 401/403)."""


class Superseded(Exception):
    """A newer connection that presented this process's resume secret replaced this one (close
    4409): whoever holds it runs this node's jobs now. This one must stop its jobs and exit, or
    both would run them."""


class Backoff:
    """0.5 s, 1 s, 2 s, … capped at 10 s, each scaled by a random 50–100 %, so a fleet of agents
    does not reconnect in lockstep when the console comes back."""

    def __init__(self, initial: float = 0.5, maximum: float = 10.0, rng: Callable[[], float] = random.random) -> None:
        self.initial, self.maximum, self.rng = initial, maximum, rng
        self.failures = 0

    def next(self) -> float:
        delay = min(self.maximum, self.initial * 2.0**self.failures)
        self.failures = min(self.failures + 1, 30)
        return delay * (0.5 + self.rng() / 2)

    def reset(self) -> None:
        self.failures = 0

    def saturate(self) -> None:
        self.failures = 30


def frames(batch: list[tuple[int, str]], limit: int) -> Iterator[tuple[str, int]]:
    """Spooled messages (msg_id, text) as frames (text, the last msg_id in it): up to `limit`
    messages in one frame as a JSON array, in order, within MAX_FRAME_CHARS (a larger message
    goes alone, as itself). One frame instead of a burst of them costs the console a fraction."""
    chunk: list[tuple[int, str]] = []
    size = 0
    for msg_id, text in batch:
        if chunk and (len(chunk) == limit or size + len(text) > MAX_FRAME_CHARS):
            yield _frame(chunk)
            chunk, size = [], 0
        chunk.append((msg_id, text))
        size += len(text) + 1
    if chunk:
        yield _frame(chunk)


def _frame(chunk: list[tuple[int, str]]) -> tuple[str, int]:
    if len(chunk) == 1:
        return chunk[0][1], chunk[0][0]
    return "[" + ",".join(text for _, text in chunk) + "]", chunk[-1][0]


class Connection:
    def __init__(
        self, ws_url: str, token: str, node: protocol.NodeInfo, spool: Spool, supervisor: Supervisor,
        on_welcome: Callable[[protocol.Welcome], None] = lambda welcome: None, backoff: Backoff | None = None,
        on_inject: Callable[[protocol.InjectFault], None] = lambda message: None,
    ) -> None:
        self.ws_url, self.token, self.node = ws_url, token, node
        self.spool, self.supervisor, self.on_welcome = spool, supervisor, on_welcome
        self.on_inject = on_inject
        # when the console was last heard from: the agent fences itself after a long silence
        self.last_contact = 0.0  # loop time; set by the agent at start and on every message
        self.backoff = backoff or Backoff()
        self.heartbeat_interval = protocol.HEARTBEAT_INTERVAL
        self.batch_limit = 1  # spooled messages per frame: what this session's welcome allows
        self.connected = asyncio.Event()
        # the last welcome's resume secret: memory only, sent in the next hello ("" before the first)
        self.resume = ""
        self._wake = asyncio.Event()
        self._interval_changed = asyncio.Event()
        spool.on_append = self._wake.set
        self._error = ""
        self._ws: ClientConnection | None = None  # the open connection, once welcomed

    async def goodbye(self, reason: str) -> bool:
        """Tell the console this agent is exiting cleanly, so that it moves the node's jobs on at
        once rather than after the heartbeat grace. False when not connected (the close, or the
        silence, tells the console instead)."""
        ws = self._ws
        if ws is None or not self.connected.is_set():
            return False
        try:
            await ws.send(json.dumps(protocol.Goodbye(type="goodbye", reason=reason[:200])))
        except ConnectionClosed:
            return False
        return True

    async def run(self) -> None:
        """Connect, serve, reconnect: returns never; raises TokenRejected or Superseded."""
        while True:
            try:
                async with connect(
                    self.ws_url, additional_headers={"Authorization": f"Bearer {self.token}"},
                    open_timeout=10, max_size=16 * 2**20,
                ) as ws:
                    log.info("connected to %s", self.ws_url)
                    await self._session(ws)
                log.warning("the console closed the connection (code %s %s)", ws.close_code, ws.close_reason or "")
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status in (401, 403):
                    body = (exc.response.body or b"").decode("utf-8", errors="replace").strip()
                    raise TokenRejected(body or f"HTTP {status} {exc.response.reason_phrase}") from exc
                log.warning("the console answered the WebSocket handshake with HTTP %s", status)
            except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed) as exc:
                log.warning("cannot reach the console at %s: %s", self.ws_url, exc or type(exc).__name__)
            except (TokenRejected, Superseded):
                raise
            except Exception:  # a bug must cost a reconnect, not the agent (its jobs keep running)
                log.exception("the connection to the console failed")
            finally:
                self.connected.clear()
                self._ws = None
            delay = self.backoff.next()
            log.info("reconnecting in %.1f s", delay)
            await asyncio.sleep(delay)

    async def _session(self, ws: ClientConnection) -> None:
        self._error = ""
        contact = self.last_contact
        self.batch_limit = 1  # until this console's welcome says it takes batched frames
        hello = protocol.Hello(
            type="hello", protocol=protocol.PROTOCOL_VERSION, node=self.node, running=self.supervisor.running(),
            ended=self.supervisor.ended(), sent_at=time.time(),
        )
        if self.resume:
            hello["resume"] = self.resume
        with contextlib.suppress(ConnectionClosed):
            # a refusal (error + close 4401) may arrive before our hello is out: read it below
            await ws.send(json.dumps(hello))
        self._ws = ws
        receiver = asyncio.create_task(self._receive(ws))
        others = {asyncio.create_task(self._send_spooled(ws)), asyncio.create_task(self._heartbeat(ws))}
        try:
            done, _ = await asyncio.wait({receiver, *others}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the agent is shutting down
            for task in (receiver, *others):
                task.cancel()
            await asyncio.gather(receiver, *others, return_exceptions=True)
            await ws.close(1001, "node agent shutting down")
            raise
        if receiver not in done:
            # a send failed: close, then let the receiver read what arrived before the close
            # (an `error` message explaining a 4401 comes right before it)
            await ws.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(receiver, timeout=2)
        for task in others:
            task.cancel()
        for task in (receiver, *others):
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await task  # re-raises a bug in a task instead of hiding it
        if ws.close_code == protocol.CLOSE_BAD_TOKEN:
            raise TokenRejected(self._error or ws.close_reason or "the token was refused")
        if ws.close_code == protocol.CLOSE_SUPERSEDED:
            raise Superseded(self._error or f"another connection of node {self.node['name']} replaced this one")
        if ws.close_code == protocol.CLOSE_NODE_IN_USE:
            # another connection holds the node and is alive: not ours to take. The backoff grows
            # (no welcome reset it); an agent that restarted gets in once the console sees the old
            # connection gone. A refusal is no contact: what this process runs is fenced as usual
            self.last_contact = contact
            log.error("the node is held by another live connection (close %s); retrying with backoff", ws.close_code)
        if ws.close_code == protocol.CLOSE_TRY_AGAIN:
            # the console is there but degraded (its database or Redis is away): not a cut-off,
            # so the jobs keep running; everything unacknowledged is re-sent on the next connection
            self.last_contact = asyncio.get_running_loop().time()
            log.warning("the console is degraded (%s); retrying", self._error or "try again later")

    async def _receive(self, ws: ClientConnection) -> None:
        async for raw in ws:
            try:
                message = json.loads(raw)
            except ValueError:
                log.warning("ignored a frame that is not JSON: %.200r", raw)
                continue
            if not isinstance(message, dict):
                continue
            self.last_contact = asyncio.get_running_loop().time()
            try:
                self._dispatch(message)
            except Exception:  # one bad message must not end the session
                log.exception("could not handle a %r message", message.get("type"))

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "ack":
            self.spool.ack(int(message.get("upto", 0)))
        elif kind == "desired":
            self.supervisor.reconcile(message.get("placements") or [])
        elif kind == "welcome":
            self.heartbeat_interval = float(message.get("heartbeat_interval") or protocol.HEARTBEAT_INTERVAL)
            self.batch_limit = max(1, min(int(message.get("batch_limit") or 1), MAX_FRAME_MESSAGES))
            self.resume = str(message.get("resume") or "")
            self._interval_changed.set()
            self.on_welcome(message)  # type: ignore[arg-type]
            self.backoff.reset()  # only a console that accepted us resets the backoff
            self.connected.set()
            log.info("registered as node %s (id %s)", self.node["name"], message.get("node_id"))
        elif kind == "inject_fault":
            self.on_inject(message)  # type: ignore[arg-type]
        elif kind == "error":
            if message.get("msg_id") is not None:
                # one message was refused; its ack follows, and it is dropped (kept by the console for staff)
                log.error("the console refused message %s: %s", message.get("msg_id"), message.get("message", ""))
                return
            self._error = str(message.get("message", ""))
            log.error("the console reports an error: %s", self._error)
        else:
            log.warning("ignored a message of unknown type %r", kind)

    async def _send_spooled(self, ws: ClientConnection) -> None:
        sent_upto = self.spool.acked  # a new connection re-sends everything unacknowledged
        while True:
            batch = self.spool.unsent(sent_upto)
            if not batch:
                self._wake.clear()
                batch = self.spool.unsent(sent_upto)  # appended between the check and the clear
                if not batch:
                    await self._wake.wait()
                    continue
            self.spool.sync()  # on disk before on the wire: an ack must never cover a message we could lose
            for frame, last in frames(batch, self.batch_limit):
                await ws.send(frame)
                sent_upto = last

    async def _heartbeat(self, ws: ClientConnection) -> None:
        while True:
            try:
                # `welcome` (after this loop began) may change the interval: start over with it
                await asyncio.wait_for(self._interval_changed.wait(), timeout=self.heartbeat_interval)
                self._interval_changed.clear()
                continue
            except TimeoutError:
                pass
            beat = protocol.Heartbeat(type="heartbeat", running=self.supervisor.running(), sent_at=time.time())
            await ws.send(json.dumps(beat))

    async def drain(self, timeout: float) -> bool:
        """Wait until the console has acknowledged everything spooled (used at shutdown)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while len(self.spool) and asyncio.get_running_loop().time() < deadline:
            if not self.connected.is_set():
                return False
            await asyncio.sleep(0.05)
        return not len(self.spool)
