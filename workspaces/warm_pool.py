"""The warm pool: which nodes are warm for whom, and whether a placement starts warm.

Plain data in, decisions out (no Django, no database). A node is *warm* for a user after one
of that user's jobs ended on it, for that job's keep-alive: the node agent kept the prepared
environment (image, training script and data) keyed by (user, image, script URL). While warm,
the GPUs it used are held warm for that user (jobs.scheduling.capacity) — a cache, not a reservation: a job
of anyone that would otherwise wait takes them. A following job of the same user with a
compatible configuration (same server type, image and script; its node count fitting) prefers
those nodes and skips the preparation step.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class WarmEntry:
    """The newest ended placement of one (node, user, image, script) whose environment is kept."""

    node_id: int
    node_name: str
    owner_id: int
    job_id: int
    job_name: str
    server_type: str
    image: str
    script_url: str
    ended_at: datetime
    expires_at: datetime

    def warm_at(self, now: datetime) -> bool:
        return now < self.expires_at


@dataclass(frozen=True)
class JobConfig:
    job_id: int
    owner_id: int
    server_type: str
    image: str
    script_url: str
    node_count: int


def newest(entries: Iterable[WarmEntry]) -> list[WarmEntry]:
    """One entry per (node, owner, image, script): the latest to end decides the keep-alive."""
    latest: dict[tuple[int, int, str, str], WarmEntry] = {}
    for entry in entries:
        key = (entry.node_id, entry.owner_id, entry.image, entry.script_url)
        if key not in latest or entry.ended_at > latest[key].ended_at:
            latest[key] = entry
    return list(latest.values())


ConfigKey = tuple[int, str, str, str]  # owner, server type, image, training script


def config_key(job: JobConfig) -> ConfigKey:
    return (job.owner_id, job.server_type, job.image, job.script_url)


def entry_key(entry: WarmEntry) -> ConfigKey:
    return (entry.owner_id, entry.server_type, entry.image, entry.script_url)


def compatible(entry: WarmEntry, job: JobConfig) -> bool:
    return entry_key(entry) == config_key(job)


def by_config(entries: Iterable[WarmEntry]) -> dict[ConfigKey, list[WarmEntry]]:
    """Entries by the configuration they fit: a run asks for thousands of queued jobs which
    nodes are warm for them, and each then looks at its own few entries, not at all of them."""
    found: dict[ConfigKey, list[WarmEntry]] = {}
    for entry in entries:
        found.setdefault(entry_key(entry), []).append(entry)
    return found


def warm_nodes(entries: Iterable[WarmEntry], job: JobConfig, now: datetime) -> dict[int, WarmEntry]:
    """Node id → the entry a placement of `job` on that node would reuse."""
    return {e.node_id: e for e in entries if e.warm_at(now) and compatible(e, job)}


@dataclass(frozen=True)
class WarmOutcome:
    started_warm: bool
    note: str
    reuse: dict[int, WarmEntry]  # node id → the environment its placement reuses


def _nodes(entries: Iterable[WarmEntry]) -> str:
    return ", ".join(sorted({e.node_name for e in entries}))


def _jobs(entries: Iterable[WarmEntry]) -> str:
    return ", ".join(sorted({e.job_name for e in entries}))


def _clock(moment: datetime) -> str:
    return moment.strftime("%H:%M:%S %Z").strip()


def outcome(
    job: JobConfig,
    assigned: list[int],
    recent: Iterable[WarmEntry],
    now: datetime,
    why_taken: dict[int, str] | None = None,
) -> WarmOutcome:
    """Whether the job, placed on `assigned` nodes, starts warm; and if not, why not.

    `recent` holds the owner's entries of the last day (expired ones too, to say "keep-alive
    expired"); `why_taken` says, per node, why a warm node could not be used (busy, offline,
    reserved by a workspace, outside the job's workspace).
    """
    mine = [e for e in newest(recent) if e.owner_id == job.owner_id]
    reuse = {node: entry for node, entry in warm_nodes(mine, job, now).items() if node in assigned}
    if reuse and len(reuse) == len(assigned):
        return WarmOutcome(True, f"Started warm on {_nodes(reuse.values())}: environment reused from job {_jobs(reuse.values())}", reuse)
    cold = [node for node in assigned if node not in reuse]
    if reuse:
        return WarmOutcome(
            False,
            f"Partly warm: {_nodes(reuse.values())} reused job {_jobs(reuse.values())}'s environment; "
            f"{len(cold)} node(s) were prepared from scratch (no more warm nodes fitted)",
            reuse,
        )
    return WarmOutcome(False, "Cold start: " + _why_cold(job, mine, now, why_taken or {}), {})


def _why_cold(job: JobConfig, mine: list[WarmEntry], now: datetime, why_taken: dict[int, str]) -> str:
    same_type = [e for e in mine if e.server_type == job.server_type]
    usable = [e for e in same_type if e.warm_at(now) and compatible(e, job)]
    if usable:
        reasons = sorted({why_taken.get(e.node_id, "taken") for e in usable})
        return f"the warm nodes of job {_jobs(usable)} ({_nodes(usable)}) were {' / '.join(reasons)}"
    expired = [e for e in same_type if compatible(e, job) and not e.warm_at(now)]
    if expired:
        last = max(expired, key=lambda e: e.expires_at)
        return f"the keep-alive of job {last.job_name}'s nodes expired at {_clock(last.expires_at)}"
    live = [e for e in same_type if e.warm_at(now)]
    if live:
        last = max(live, key=lambda e: e.ended_at)
        if last.image != job.image:
            return f"your warm nodes ({last.node_name}, job {last.job_name}) hold a different image ({last.image})"
        return f"your warm nodes ({last.node_name}, job {last.job_name}) hold a different training script ({last.script_url or 'none'})"
    other = [e for e in mine if e.warm_at(now)]
    if other:
        return f"your warm nodes ({_nodes(other)}) are of another server type"
    return "no job of yours left warm nodes for this configuration"
