"""A stand-in console on loopback for the unit tests: canned answers per (method, path), and a
record of what was asked. Real HTTP through the client's own transport, no console behind it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    status: int
    body: Any = None


@dataclass
class FakeConsole:
    url: str = ""
    answers: dict[tuple[str, str], list[Answer]] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def on(self, method: str, path: str, status: int, body: Any = None) -> None:
        """Answer `method path` (path without the query) this way; several calls queue answers, the last repeats."""
        self.answers.setdefault((method, path), []).append(Answer(status, body))

    def answer(self, method: str, path: str) -> Answer:
        queue = self.answers.get((method, path))
        if not queue:
            return Answer(404, {"detail": "No TrainingJob matches the given query."})
        return queue.pop(0) if len(queue) > 1 else queue[0]


def _handler(console: FakeConsole) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            path, _, query = self.path.partition("?")
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            console.requests.append({"method": self.command, "path": path, "query": query, "body": body,
                                     "authorization": self.headers.get("Authorization")})
            answer = console.answer(self.command, path)
            raw = b"" if answer.body is None else json.dumps(answer.body).encode()
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = do_PATCH = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def fake_console() -> Iterator[FakeConsole]:
    console = FakeConsole()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(console))
    console.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield console
    finally:
        server.shutdown()
        server.server_close()


def job(**overrides: Any) -> dict[str, Any]:
    """A job as the API shows it."""
    body = {
        "id": 42, "name": "bert", "learning_type": "on_demand", "framework": "pytorch", "framework_version": "2.13.0",
        "failover_enabled": False, "server_type": "g2", "gpus_per_node": 1, "memory_gb": 256, "node_count": 1,
        "shm_size_gb": 64, "image_url": "registry.example.com/team/trainer:1", "registry_username": "",
        "has_registry_password": False, "volume_mount_path": "", "script_url": "", "command": "python train.py",
        "tags": [], "status": "Pending", "status_reason": "Waiting to be scheduled",
        "created_at": "2026-12-04T18:00:00Z", "updated_at": "2026-12-04T18:00:00Z", "hourly_price": "3.10",
        "cost": {"amount": "0.00"}, "history": [{"old_status": "", "new_status": "Pending", "reason": "",
                                                  "created_at": "2026-12-04T18:00:00Z"}],
        "workspace": "", "keep_alive_minutes": 10, "started_warm": False, "warm_note": "",
    }
    return {**body, **overrides}


SERVER_TYPES = {"count": 2, "next": None, "previous": None, "results": [
    {"name": "g3", "gpu_model": "NVIDIA B300 SXM", "gpus_per_node": 8, "on_demand_price_per_gpu_hour": "6.4000",
     "spot_price_per_gpu_hour": "2.5600", "allocations": [{"name": f"a{g}", "gpus": g, "vcpus": 1, "memory_gb": 1} for g in (1, 2, 4, 8)]},
    {"name": "g2", "gpu_model": "NVIDIA H100 SXM", "gpus_per_node": 8, "on_demand_price_per_gpu_hour": "3.1000",
     "spot_price_per_gpu_hour": "1.2400", "allocations": [{"name": f"a{g}", "gpus": g, "vcpus": 1, "memory_gb": 1} for g in (1, 2, 4, 8)]},
]}
