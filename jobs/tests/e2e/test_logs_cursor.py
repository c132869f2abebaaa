"""Two real agents stream logs in parallel; a client of the logs API polling with the cursor and a
Logs-tab socket that drops and resumes both see every stored line exactly once.

Each agent's batches commit independently, so line ids become visible out of order: the
deprecated id cursor (`since`) polled alongside shows what that costs.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest
import requests
from rest_framework.authtoken.models import Token
from websockets.sync.client import connect

from monitoring.models import LogLine

from .helpers import create_job, wait_for_status
from .stack import wait_until
from .test_logs_live import session_cookie

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

LINES_PER_NODE = 30_000
FIRST_PART = 10_000  # per node, before the Logs tab's reconnect: see CATCH_UP_LIMIT below
DROP_AFTER = 5_000  # lines the Logs tab reads before its connection drops
# both nodes print as fast as the agents ship: many batches of the two streams commit concurrently;
# they start once the readers are watching (the files appear on this same machine). The rest
# waits for the tab's reconnect: a page further behind than the console's CATCH_UP_LIMIT (20,000)
# starts afresh from the tail, and two agents store 20,000 lines in well under a second
SYNC = "/mnt/sync"  # where the test's signal files appear inside the jobs
COMMAND = ('while [ ! -e {go} ]; do sleep 0.1; done; seq 1 {first} | sed "s/^/line /"; '
           'while [ ! -e {rest} ]; do sleep 0.1; done; seq {after_first} {lines} | sed "s/^/line /"')


class Poller(threading.Thread):
    """Polls the logs API in a loop, with the cursor (`next`) or with the deprecated `since`."""

    def __init__(self, url: str, token: str, mode: str) -> None:
        super().__init__(daemon=True)
        self.url, self.mode = url, mode
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"
        self.seen: Counter = Counter()
        self.state: dict = {} if mode == "cursor" else {"since": 0}
        self.done = threading.Event()

    def poll(self) -> bool:
        params = {"limit": 5000, **self.state}
        body = self.session.get(self.url, params=params, timeout=30).json()
        self.seen.update((line["stream"], line["attempt"], line["seq"]) for line in body["lines"])
        self.state = {"cursor": body["next"]} if self.mode == "cursor" else {"since": body["next_since"]}
        return body["more"]

    def run(self) -> None:
        while not self.done.is_set():
            self.poll()

    def drain(self) -> None:
        self.done.set()
        self.join(60)
        while self.poll():
            pass


class LogsTab(threading.Thread):
    """The Logs tab's socket: reads its backlog and new lines, drops the connection once
    mid-stream and reconnects with the last cursor, as the page does."""

    def __init__(self, base: str, job_id: int, cookie: dict) -> None:
        super().__init__(daemon=True)
        self.url = base.replace("http", "ws") + f"/ws/jobs/{job_id}/logs/"
        self.headers = {"Cookie": f"{cookie['name']}={cookie['value']}", "Origin": base}
        self.seen: Counter = Counter()
        self.cursor = ""
        self.reconnects = 0
        self.kinds: list[str] = []  # each session's first event: log.backlog, or log.append on a resume
        self.connected = threading.Event()
        self.resumed = threading.Event()
        self.done = threading.Event()

    def _session(self, drop_after: int | None) -> None:
        url = self.url + (f"?after={self.cursor}" if self.cursor else "")
        with connect(url, additional_headers=self.headers, max_size=2**26) as socket:
            first = True
            while not self.done.is_set():
                try:
                    event = json.loads(socket.recv(timeout=0.5))
                except TimeoutError:
                    continue
                if first:
                    self.kinds.append(event["type"])
                    first = False
                self.seen.update((line["stream"], line["attempt"], line["seq"]) for line in event["lines"])
                self.cursor = event["cursor"]
                (self.resumed if self.reconnects else self.connected).set()
                if drop_after is not None and sum(self.seen.values()) >= drop_after:
                    return  # the connection drops here; lines stored meanwhile wait for the resume

    def run(self) -> None:
        self._session(drop_after=DROP_AFTER)
        time.sleep(0.5)
        self.reconnects += 1
        self._session(drop_after=None)


def test_every_line_of_two_parallel_agents_is_read_exactly_once(alice, stack, start_nodes):
    start_nodes("node-a", "node-b")
    token = Token.objects.create(user=alice).key
    # the signals reach the sandboxed commands through Alice's File Storage share (their /tmp is their own)
    share = stack.share(alice.pk)
    go, rest = share / "go", share / "rest"
    command = COMMAND.format(go=f"{SYNC}/go", rest=f"{SYNC}/rest", first=FIRST_PART, after_first=FIRST_PART + 1,
                             lines=LINES_PER_NODE)
    job = create_job(alice, "two-streams", command, node_count=2, volume_mount_path=SYNC)
    url = f"{stack.url}/api/v1/training-jobs/{job.pk}/logs/"
    cursor_poller, since_poller = Poller(url, token, "cursor"), Poller(url, token, "since")
    tab = LogsTab(stack.url, job.pk, session_cookie(alice, stack.url))
    for reader in (cursor_poller, since_poller, tab):
        reader.start()
    assert tab.connected.wait(30), "the Logs tab did not connect"
    go.touch()
    assert tab.resumed.wait(120), "the Logs tab did not resume after its drop"
    rest.touch()  # the rest streams in while the resumed tab follows

    job = wait_for_status(job.pk, "Completed", "Failed", timeout=180)
    assert job.status == "Completed", job.status_reason
    wait_until(
        lambda: LogLine.objects.filter(job=job, text__startswith="line ").count() == 2 * LINES_PER_NODE,
        timeout=60, message="every printed line to be stored",
    )
    time.sleep(1.0)  # the agents' last batches and the console's closing lines
    cursor_poller.drain()
    since_poller.drain()
    wait_until(lambda: sum(tab.seen.values()) >= LogLine.objects.filter(job=job).count(), timeout=30,
               message="the Logs tab to catch up")
    tab.done.set()
    tab.join(10)

    rows = Counter(LogLine.objects.filter(job=job).values_list("stream", "attempt", "seq"))
    assert {stream for stream, _, _ in rows} == {"master", "worker-1"}
    assert max(cursor_poller.seen.values()) == 1, "the cursor returned a line twice"
    assert cursor_poller.seen == rows, f"the cursor missed {len(rows - cursor_poller.seen)} lines"
    assert tab.reconnects == 1
    assert tab.kinds == ["log.backlog", "log.append"], "the resume did not continue from the cursor"
    assert max(tab.seen.values()) == 1, "the Logs tab got a line twice"
    assert tab.seen == rows, f"the Logs tab missed {len(rows - tab.seen)} lines across its reconnect"
    # for the record (timing-dependent, not asserted): what the deprecated id cursor missed
    missed = sum((rows - since_poller.seen).values())
    print(f"\n{sum(rows.values())} lines; the id cursor (since) missed {missed}, the cursor 0, the Logs tab 0")
