"""Checkpoint commits: tell the console when a placement's checkpoint is durable in object storage.

A job that mirrors its concurrent checkpoints (CHECKPOINT_S3_URL in its environment) writes
`step-N/MANIFEST.json` last; once that key exists the checkpoint is complete there, and the
console may resume a failed-over or interrupted attempt from it. Only steps whose manifest is
signed with the job's key are reported (checkpoint_trust). The console accepts the commit only
from the job's current attempt (fencing).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from .checkpoint_trust import TrustedSteps
from .logstream import Outbox

if TYPE_CHECKING:
    from .runner import Runner

log = logging.getLogger(__name__)
POLL_SECONDS = 1.0


class CheckpointWatcher:
    def __init__(self, runners: Callable[[], list[Runner]], outbox: Outbox) -> None:
        self.runners, self.outbox = runners, outbox
        self.reported: dict[str, int] = {}
        self.trusted = TrustedSteps()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            try:
                await self.poll()
            except Exception:  # a listing error must not stop the watcher
                log.warning("checkpoint poll failed", exc_info=True)

    async def poll(self) -> None:
        runners = self.runners()
        for runner in runners:
            await self.poll_one(runner)
        self.trusted.forget({(r.placement.get("env") or {}).get("CHECKPOINT_S3_URL", "") for r in runners})

    async def poll_one(self, runner: Runner) -> None:
        """Report the newest durable step of one placement (also called once after it exits)."""
        placement = runner.placement
        url = (placement.get("env") or {}).get("CHECKPOINT_S3_URL")
        if not url:
            return
        storage = await asyncio.to_thread(runner.storage)  # the placement's own credentials
        if storage is None:
            return
        steps = await asyncio.to_thread(self.trusted.steps, storage, url, placement.get("env") or {})
        key = f"{placement['job_id']}/{placement['attempt']}/{placement['role']}"
        newest = steps[-1] if steps else None
        if newest is not None and newest > self.reported.get(key, -1):
            self.reported[key] = newest
            self.outbox.checkpoint(placement, newest, f"{url.rstrip('/')}/step-{newest}")
