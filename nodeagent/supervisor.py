"""Reconciliation: the console's desired list → one runner task per placement.

Level-triggered like a kubelet: every `desired` message is the full list, so the same
message may arrive many times (after each reconnect, every few heartbeats) and must be safe
to apply again. A placement runs at most once per node: once started it is never started
again for the same (job, attempt, role), even after it exited or the agent restarted — a
retry is a new attempt chosen by the console.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from pathlib import Path
from typing import Any

from .protocol import MAX_ENDED_REFS, Placement, RunningRef, placement_key
from .runner import Runner, RunnerContext
from .workdirs import attempt_paths, read_markers, write_marker

log = logging.getLogger(__name__)


def _ref(key: str) -> RunningRef:
    job_id, attempt, role = key.split("/", 2)
    return RunningRef(job_id=int(job_id), attempt=int(attempt), role=role)


class Supervisor:
    def __init__(self, ctx: RunnerContext) -> None:
        self.ctx = ctx
        self.runners: dict[str, Runner] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.finished: set[str] = set()
        self.recently_ended: deque[str] = deque(maxlen=MAX_ENDED_REFS)  # newest last, for the hello

    def reconcile(self, placements: list[Placement]) -> None:
        listed: dict[str, Placement] = {}
        for placement in placements:
            try:
                listed[placement_key(placement["job_id"], placement["attempt"], placement["role"])] = placement
            except (KeyError, TypeError):
                log.warning("ignored a malformed placement: %r", placement)
        for key, placement in listed.items():
            if key in self.runners or key in self.finished:
                continue
            if attempt_paths(self.ctx.work_dir, placement).exists():
                # started by an earlier agent process (recover() has reported how it ended)
                log.warning("placement %s already ran on this node; not starting it again", key)
                self.finished.add(key)
                continue
            self._start(key, placement)
        for key, runner in self.runners.items():
            if key not in listed:
                runner.request_stop("the console no longer assigns it to this node")

    def _start(self, key: str, placement: Placement) -> None:
        log.info("starting placement %s", key)
        runner = Runner(placement, self.ctx)
        self.runners[key] = runner
        task = asyncio.create_task(runner.run(), name=f"placement {key}")
        self.tasks[key] = task
        task.add_done_callback(lambda _: self._ended(key))

    def _ended(self, key: str) -> None:
        self.runners.pop(key, None)
        self.tasks.pop(key, None)
        self.finished.add(key)
        self.recently_ended.append(key)
        log.info("placement %s ended", key)

    def crash_gpu(self, gpu_index: int, reason: str) -> None:
        """Kill, without grace, every placement that uses this GPU (a simulated hardware fault)."""
        for runner in list(self.runners.values()):
            if gpu_index in runner.placement.get("gpu_indices", []):
                runner.crash(reason)

    def fence(self, reason: str, grace: float) -> int:
        """Stop every placement with a short grace: this node was cut off from the console."""
        for runner in list(self.runners.values()):
            runner.placement = {**runner.placement, "stop_grace_seconds": min(runner.grace, grace)}
            runner.request_stop(reason)
        return len(self.runners)

    def ended(self) -> list[RunningRef]:
        """Placements this agent process saw end, newest last (their reports may be spooled still)."""
        return [_ref(key) for key in self.recently_ended]

    def running(self) -> list[RunningRef]:
        """Placements this agent is responsible for now (preparing, running or stopping)."""
        return [
            RunningRef(job_id=r.placement["job_id"], attempt=r.placement["attempt"], role=r.placement["role"])
            for r in self.runners.values()
        ]

    async def shutdown(self, reason: str = "the node agent is shutting down") -> None:
        """Stop every placement (SIGTERM → grace → SIGKILL) and wait for their exit reports."""
        for runner in list(self.runners.values()):
            runner.request_stop(reason)
        if self.tasks:
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)

    async def recover(self) -> None:
        """After an agent restart: stop commands an earlier agent started and report them exited.

        The earlier agent's pipes are gone, so such a command can no longer be watched or have
        its output shipped; it is stopped (it may be holding GPUs) and the console hears that
        the placement ended, so it can fail the attempt over instead of waiting for it.
        Runs beside the connection (a grace period must not delay the node's hello); the
        keys are marked finished first, so a `desired` arriving meanwhile never restarts them.
        """
        left = [
            (path, marker) for path, marker in read_markers(self.ctx.work_dir)
            if marker.get("state") != "exited" and {"job_id", "attempt", "role"} <= marker.keys()
        ]
        for _, marker in left:
            key = placement_key(marker["job_id"], marker["attempt"], marker["role"])
            self.finished.add(key)
            self.recently_ended.append(key)
        await asyncio.gather(*(self._recover_one(path, marker) for path, marker in left))

    async def _recover_one(self, path: Path, marker: dict[str, Any]) -> None:
        key = placement_key(marker["job_id"], marker["attempt"], marker["role"])
        grace = float(marker.get("grace", self.ctx.default_grace))
        if marker.get("runtime") == self.ctx.runtime.name and marker.get("execution"):
            log.warning("stopping placement %s left running by an earlier agent process", key)
            try:
                await self.ctx.runtime.kill_orphan(marker["execution"], grace)
            except Exception:  # the report below matters more than a failed stop
                log.exception("could not stop placement %s", key)
        self._report_lost(marker)
        write_marker(path, {**marker, "state": "exited"})

    def _report_lost(self, marker: dict[str, Any]) -> None:
        placement: Any = {"job_id": marker["job_id"], "attempt": marker["attempt"], "role": marker["role"]}
        self.ctx.outbox.attempt(
            placement, "exited", exit_code=None, signal=None,
            message="the node agent restarted while this placement was "
            f"{marker.get('state', 'running')}; its command was stopped",
        )
