"""Checkpoint commits: tell the console when a placement's checkpoint is durable in object storage.

A job that mirrors its concurrent checkpoints (CHECKPOINT_S3_URL in its environment) writes
`step-N/MANIFEST.json` last; once that key exists the checkpoint is complete there, and the
console may resume a failed-over or interrupted attempt from it. The console accepts the
commit only from the job's current attempt (fencing).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from .logstream import Outbox
from .storage import Storage, parse_s3_url

if TYPE_CHECKING:
    from .runner import Runner

log = logging.getLogger(__name__)
POLL_SECONDS = 1.0
_MANIFEST_KEY = re.compile(r"(?:^|/)step-(\d+)/MANIFEST\.json$")


def complete_steps(storage: Storage, url: str) -> list[int]:
    bucket, prefix = parse_s3_url(url.rstrip("/") + "/")
    steps = []
    paginator = storage.client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            match = _MANIFEST_KEY.search(item["Key"])
            if match:
                steps.append(int(match.group(1)))
    return sorted(steps)


class CheckpointWatcher:
    def __init__(self, runners: Callable[[], list[Runner]], outbox: Outbox, storage: Callable[[], Storage | None]) -> None:
        self.runners, self.outbox, self.storage = runners, outbox, storage
        self.reported: dict[str, int] = {}

    async def run(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            try:
                await self.poll()
            except Exception:  # a listing error must not stop the watcher
                log.warning("checkpoint poll failed", exc_info=True)

    async def poll(self) -> None:
        for runner in self.runners():
            await self.poll_one(runner)

    async def poll_one(self, runner: Runner) -> None:
        """Report the newest durable step of one placement (also called once after it exits)."""
        placement = runner.placement
        url = (placement.get("env") or {}).get("CHECKPOINT_S3_URL")
        if not url:
            return
        storage = await asyncio.to_thread(self.storage)
        if storage is None:
            return
        steps = await asyncio.to_thread(complete_steps, storage, url)
        key = f"{placement['job_id']}/{placement['attempt']}/{placement['role']}"
        newest = steps[-1] if steps else None
        if newest is not None and newest > self.reported.get(key, -1):
            self.reported[key] = newest
            self.outbox.checkpoint(placement, newest, f"{url.rstrip('/')}/step-{newest}")
