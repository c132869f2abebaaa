"""A refused token ends the agent process with code 2 and a message that says what to do."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from http import HTTPStatus
from pathlib import Path

from websockets.asyncio.server import serve

from nodeagent import protocol

REPO = Path(__file__).resolve().parents[2]


async def _run_agent(port: int, work_dir: Path) -> tuple[int, str]:
    env = {**os.environ, "NODEAGENT_TOKEN": "wrong-token"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nodeagent", "--console", f"http://127.0.0.1:{port}",
        "--name", "gpu-node-1", "--gpus", "simulated:1", "--work-dir", str(work_dir),
        cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
    return process.returncode, stderr.decode()


def test_it_exits_2_when_the_console_refuses_the_token(tmp_path):
    seen_headers = []

    async def refuse(ws):
        seen_headers.append(ws.request.headers.get("Authorization"))
        await ws.send(json.dumps(protocol.Error(type="error", message="the token is not known to this console")))
        await ws.close(code=protocol.CLOSE_BAD_TOKEN)

    async def scenario():
        async with serve(refuse, "127.0.0.1", 0) as server:
            return await _run_agent(server.sockets[0].getsockname()[1], tmp_path)

    code, stderr = asyncio.run(scenario())
    assert code == 2, stderr
    assert (
        "the console refused this node's token: the token is not known to this console. "
        "Mint a token with `python manage.py nodetoken gpu-node-1`." in stderr
    )
    assert seen_headers == ["Bearer wrong-token"]  # one try: retrying cannot fix a token


def test_it_exits_2_when_the_handshake_is_rejected_with_401(tmp_path):
    def reject(connection, request):
        return connection.respond(HTTPStatus.UNAUTHORIZED, "token revoked\n")

    async def scenario():
        async with serve(lambda ws: None, "127.0.0.1", 0, process_request=reject) as server:
            return await _run_agent(server.sockets[0].getsockname()[1], tmp_path)

    code, stderr = asyncio.run(scenario())
    assert code == 2, stderr
    assert "the console refused this node's token: token revoked." in stderr
