"""How every console process is started: daphne with limits that fit the agent protocol."""

from __future__ import annotations

import sys

from nodeagent.protocol_checks import MAX_MESSAGE_BYTES

# a fleet reconnecting at once (after a console restart) must not time out in the handshake
CONNECT_TIMEOUT_SECONDS = 30


def daphne_command(port: int | str, host: str = "127.0.0.1", python: str = sys.executable) -> list[str]:
    """The daphne command line: frames and messages up to the protocol's limit (an agent's
    largest batch is far below it; daphne's default 1 MiB would cut legitimate ones off)."""
    return [
        python, "-m", "daphne", "-b", host, "-p", str(port),
        "--websocket-max-message-size", str(MAX_MESSAGE_BYTES), "--websocket-max-frame-size", str(MAX_MESSAGE_BYTES),
        "--websocket_connect_timeout", str(CONNECT_TIMEOUT_SECONDS),
        "console.asgi:application",
    ]
