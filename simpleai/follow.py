"""Following a job's logs until it ends, riding out a console restart.

The logs API hands out a cursor (`next`) that says, per stream, the last line read; asking
again with it after any break gives every later line once (monitoring/log_cursor.py on the
console). So a dropped connection is retried with the same cursor until the console answers
again, for up to `patience` seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO, TypeVar

from .api_types import Job, LogLine
from .client import ENDED_STATUSES, Client
from .errors import ApiError, Unreachable

T = TypeVar("T")
PAGE = 5000  # lines per request (the API's most)


@dataclass
class Follower:
    client: Client
    job_id: int
    out: TextIO
    err: TextIO
    stream: str | None = None  # one role's lines (master, worker-1, …); all when None
    prefix: bool = False  # each line starts with its stream (a job of several nodes)
    as_json: bool = False  # each line as a JSON object (id, stream, attempt, seq, ts, text)
    interval: float = 1.0  # seconds between polls once caught up
    patience: float = 300.0  # seconds to keep retrying a console that does not answer
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    cursor: str | None = None
    lost_since: float | None = field(default=None, init=False)

    def print_all(self) -> None:
        """Every line stored so far, then return."""
        while self._read():
            pass

    def until_ended(self) -> Job:
        """Print lines as they come until the job has ended; the ended job."""
        while True:
            if self._read():
                continue
            job = self._retrying(lambda: self.client.job(self.job_id))
            if job["status"] in ENDED_STATUSES:
                self.sleep(self.interval)  # the closing lines are stored with or just after the status
                self.print_all()
                return job
            self.sleep(self.interval)

    def _read(self) -> bool:
        """Print the next page of lines; True when more are ready at once."""
        page = self._retrying(lambda: self.client.logs(self.job_id, cursor=self.cursor, stream=self.stream, limit=PAGE))
        for line in page["lines"]:
            self.out.write(self._format(line) + "\n")
        self.out.flush()
        self.cursor = page.get("next", self.cursor)
        return page["more"]

    def _format(self, line: LogLine) -> str:
        if self.as_json:
            return json.dumps(line, ensure_ascii=False)
        return f"{line['stream']:<9}| {line['text']}" if self.prefix else line["text"]

    def _retrying(self, call: Callable[[], T]) -> T:
        while True:
            try:
                value = call()
            except (Unreachable, ApiError) as error:
                if isinstance(error, ApiError) and error.status < 500:
                    raise
                self._lost(error)
                continue
            if self.lost_since is not None:
                self.err.write("simpleai: the console answers again; following on from where it stopped\n")
                self.err.flush()
                self.lost_since = None
            return value

    def _lost(self, error: Exception) -> None:
        now = self.clock()
        if self.lost_since is None:
            self.lost_since = now
            self.err.write(f"simpleai: lost the console ({error}); retrying for up to {self.patience:.0f} s\n")
            self.err.flush()
        elif now - self.lost_since > self.patience:
            raise Unreachable(f"the console did not answer for {self.patience:.0f} s: {error}")
        self.sleep(self.interval)
