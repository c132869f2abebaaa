"""What a command runs with: its streams, its environment, its client, the time."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TextIO

from simpleai.client import Client
from simpleai.config import load


@dataclass
class Context:
    env: Mapping[str, str]
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    stdin: TextIO = field(default_factory=lambda: sys.stdin)
    _client: Client | None = None

    def client(self) -> Client:
        """The configured console's client (read once: a command without one never asks)."""
        if self._client is None:
            self._client = Client.from_config(load(self.env))
        return self._client

    def now(self) -> datetime:
        return datetime.now(tz=UTC)

    def print(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def print_json(self, value: object) -> None:
        self.out.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")

    def note(self, text: str) -> None:
        """A message for the person at the terminal, not for a script reading stdout."""
        self.err.write(f"simpleai: {text}\n")
        self.err.flush()
