"""Fold torchrun's known end-of-run noise into one line that says what happened.

At the end of a multi-node run every node's torchrun meets the others at an exit barrier kept
in the master's rendezvous store (a c10d TCPStore inside the master node's torchrun). When a
node reaches the barrier last, the master may already have left and closed the store before
this node's final `wait` reaches it. torchrun catches that (its workers had all succeeded) and
exits 0, but not before printing about thirty lines: a C++ warning with a stack of frames
("Failed to recv … Did the remote server shutdown or crash?") and a logged Python traceback
("Error waiting on exit barrier"). Users read that as a failure.

This filter sits between the command's output and the log stream. It holds back a run of lines
that starts like that noise and, when the run turns out to be exactly the exit-barrier error,
writes one explained line instead; anything else (another line in between, the output ending
first, an unexpected error) releases the held lines unchanged, in order. The barrier is
entered only after this node's workers succeeded, so the fold never hides a failure.
"""

from __future__ import annotations

import re
from collections.abc import Callable

LineSink = Callable[[str], None]

# torch's C++ log line of a TCPStore client whose server went away
_STORE_WARNING = re.compile(r"^\[[WE]\S* [\d:.]+ TCPStore\.cpp:\d+\] \[c10d\] ")
# torchelastic's Python logging prefix, e.g. "E1130 19:11:33.332000 24171 torch/distributed/…/api.py:1008] "
_ELASTIC_PREFIX = re.compile(r"^[EWI]\d{4} [\d:.]+ \d+ torch/distributed/elastic/agent/server/api\.py:\d+\] ")
_BARRIER_ERROR = "Error waiting on exit barrier"
_STACK_LINE = re.compile(r"^(Exception raised from |frame #\d+: |<omitting python frames>$|$)")
_FINAL_ERROR = re.compile(r"torch\.distributed\.(DistNetworkError|DistStoreError|DistError): (?P<error>.+)$")
_TEARDOWN_WORDS = ("remote server shutdown or crash", "Connection reset by peer", "Broken pipe", "Connection was likely closed")
MAX_HELD = 200  # more than any real instance (about 30 lines); a longer run is released as it is

FOLDED_LINE = (
    "[INFO] torchrun finished on this node. The master node's torchrun had already closed its rendezvous "
    "store when this node reached the exit barrier: normal at the end of a multi-node run "
    "({count} lines of PyTorch teardown messages folded)"
)


class TeardownNoiseFolder:
    """feed() every output line; close() when the command has exited (releases what is held)."""

    def __init__(self, sink: LineSink) -> None:
        self.sink = sink
        self.held: list[str] = []
        self.barrier_seen = False

    def feed(self, line: str) -> None:
        if not self.held:
            if _STORE_WARNING.match(line) or self._is_barrier_error(line):
                self._hold(line)
            else:
                self.sink(line)
            return
        if self._is_barrier_error(line):
            self._hold(line)
        elif _ELASTIC_PREFIX.match(line) and self.barrier_seen:
            self._hold(line)
            final = _FINAL_ERROR.search(line)
            if final:
                self._fold_or_release(final.group("error"))
        elif _STACK_LINE.match(line) and not self.barrier_seen:
            self._hold(line)
        else:
            self.release()
            self.feed(line)
            return
        if len(self.held) > MAX_HELD:
            self.release()

    def close(self) -> None:
        self.release()

    def release(self) -> None:
        held, self.held, self.barrier_seen = self.held, [], False
        for line in held:
            self.sink(line)

    def _hold(self, line: str) -> None:
        self.held.append(line)

    def _is_barrier_error(self, line: str) -> bool:
        if _ELASTIC_PREFIX.match(line) and _BARRIER_ERROR in line:
            self.barrier_seen = True
            return True
        return False

    def _fold_or_release(self, error: str) -> None:
        if not any(word in error for word in _TEARDOWN_WORDS):
            self.release()  # the barrier failed some other way (e.g. a timeout): show all of it
            return
        count = len(self.held)
        self.held, self.barrier_seen = [], False
        self.sink(FOLDED_LINE.format(count=count))
