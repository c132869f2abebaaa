"""Line batching: a `logs` message every ~100 ms or every 500 lines."""

from __future__ import annotations

import asyncio
import json

from nodeagent.logstream import MAX_BATCH, LogStream, Outbox
from nodeagent.spool import Spool
from nodeagent.tests.agent_support import make_placement


def _batches(spool: Spool) -> list[dict]:
    return [json.loads(text) for _, text in spool.unsent(0)]


def test_lines_are_batched_by_count_and_by_time(tmp_path):
    spool = Spool(tmp_path)

    async def scenario():
        stream = LogStream(Outbox(spool), 7, 2, "worker-1")
        for i in range(MAX_BATCH + 3):
            stream.line(f"l{i}")
        assert len(_batches(spool)) == 1  # the full batch went at once
        await asyncio.sleep(0.25)  # the rest after the flush interval
        assert len(_batches(spool)) == 2

    asyncio.run(scenario())
    first, second = _batches(spool)
    assert (first["type"], first["job_id"], first["attempt"], first["stream"]) == ("logs", 7, 2, "worker-1")
    assert [line[0] for line in first["lines"] + second["lines"]] == list(range(1, MAX_BATCH + 4))
    assert second["lines"][-1][2] == f"l{MAX_BATCH + 2}"


def test_an_attempt_report_after_a_flush_follows_the_lines(tmp_path):
    spool = Spool(tmp_path)

    async def scenario():
        outbox = Outbox(spool)
        stream = LogStream(outbox, 7, 1, "master")
        stream.info("about to exit")
        stream.flush()
        outbox.attempt(make_placement(), "exited", exit_code=0, signal=None)

    asyncio.run(scenario())
    logs, attempt = _batches(spool)
    assert logs["lines"][0][2] == "[INFO] about to exit"
    assert attempt == {"type": "attempt", "msg_id": 2, "job_id": 7, "attempt": 1, "role": "master",
                       "state": "exited", "exit_code": 0, "signal": None}
