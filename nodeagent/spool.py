"""The outgoing-message spool: every `logs`/`attempt` message is written here before it is sent.

Why: the console may be unreachable for minutes (restart, Redis gone) while training keeps
printing; nothing may be lost, and a message must survive an agent restart until the console
has acknowledged it. Files under the spool directory:

  messages.jsonl  one JSON message per line, msg_id increasing; may still hold acked lines
                  until the next compaction (they are skipped on reload)
  state.json      {"next_msg_id": N, "acked": M}; keeps the msg_id counter when the message
                  file has been compacted to nothing

The spool is synchronous and single-threaded (the agent's event loop owns it); `sync()` is the
batched fsync the sender calls before it puts anything on the wire.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any


class Spool:
    def __init__(self, directory: Path, compact_min: int = 1000, on_append: Callable[[], None] | None = None) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.messages_path = self.directory / "messages.jsonl"
        self.state_path = self.directory / "state.json"
        self.compact_min = compact_min  # don't rewrite the file for a handful of acked lines
        self.on_append = on_append
        self._pending: deque[tuple[int, str]] = deque()  # unacked (msg_id, JSON text), in order
        self._lines_in_file = 0
        self._dirty = False
        self.acked = 0
        self.next_msg_id = 1
        self._load()
        self._file = open(self.messages_path, "a", encoding="utf-8")  # noqa: SIM115 (lives as long as the spool)

    # -- loading -----------------------------------------------------------------------------
    def _load(self) -> None:
        if self.state_path.exists():
            state = json.loads(self.state_path.read_text() or "{}")
            self.acked = int(state.get("acked", 0))
            self.next_msg_id = max(int(state.get("next_msg_id", 1)), self.acked + 1)
        if not self.messages_path.exists():
            return
        with open(self.messages_path, encoding="utf-8") as file:
            for raw in file:
                text = raw.rstrip("\n")
                if not text:
                    continue
                try:
                    msg_id = int(json.loads(text)["msg_id"])
                except (ValueError, KeyError, TypeError):
                    # a line cut short by a crash mid-write (never fsync'ed, so never sent)
                    continue
                self._lines_in_file += 1
                self.next_msg_id = max(self.next_msg_id, msg_id + 1)
                if msg_id > self.acked:
                    self._pending.append((msg_id, text))
        # a torn last line would glue onto the next append: rewrite the file clean
        self._rewrite()

    # -- writing -----------------------------------------------------------------------------
    def append(self, message: dict[str, Any]) -> int:
        """Give the message the next msg_id and write it (fsync happens in `sync`)."""
        msg_id = self.next_msg_id
        self.next_msg_id += 1
        message["msg_id"] = msg_id
        text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
        self._file.write(text + "\n")
        self._lines_in_file += 1
        self._dirty = True
        self._pending.append((msg_id, text))
        if self.on_append is not None:
            self.on_append()
        return msg_id

    def sync(self) -> None:
        """Flush and fsync everything appended so far; cheap when nothing is new."""
        if self._dirty:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._dirty = False

    # -- reading -----------------------------------------------------------------------------
    def unsent(self, after: int) -> list[tuple[int, str]]:
        """Unacked messages with msg_id > `after`, oldest first (the resend order)."""
        return [(msg_id, text) for msg_id, text in self._pending if msg_id > after]

    def __len__(self) -> int:
        return len(self._pending)

    # -- acknowledgement ---------------------------------------------------------------------
    def ack(self, upto: int) -> None:
        """The console stored every message up to `upto`; drop them, compact when most is acked."""
        if upto <= self.acked:
            return
        if upto >= self.next_msg_id:
            # the console knows higher ids than this spool (its work dir was wiped): never reuse them
            self.next_msg_id = upto + 1
        self.acked = upto
        while self._pending and self._pending[0][0] <= upto:
            self._pending.popleft()
        acked_in_file = self._lines_in_file - len(self._pending)
        if acked_in_file >= self.compact_min and acked_in_file * 2 >= self._lines_in_file:
            self.compact()
        else:
            self._write_state(durable=False)

    def compact(self) -> None:
        self.sync()
        self._file.close()
        self._rewrite()
        self._file = open(self.messages_path, "a", encoding="utf-8")  # noqa: SIM115

    def _rewrite(self) -> None:
        # state first: if we crash between the two writes the old file still holds everything,
        # and the acked lines in it are skipped on reload
        self._write_state(durable=True)
        tmp = self.messages_path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as file:
            for _, text in self._pending:
                file.write(text + "\n")
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, self.messages_path)
        self._lines_in_file = len(self._pending)

    def _write_state(self, durable: bool) -> None:
        # an ack lost in a crash only means a few re-sent duplicates (the console dedupes),
        # so routine acks skip the fsync; compaction needs it (it deletes the acked lines)
        tmp = self.state_path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as file:
            json.dump({"next_msg_id": self.next_msg_id, "acked": self.acked}, file)
            if durable:
                file.flush()
                os.fsync(file.fileno())
        os.replace(tmp, self.state_path)

    def close(self) -> None:
        self.sync()
        self._write_state(durable=True)
        self._file.close()
