"""Unix identities for placements: a user of its own per placement, a group per tenant.

Every placement's command runs as an unprivileged user allocated for it from a range the
operator reserves (`--job-uids`, never root, never the agent's own user), and with the group of
its tenant (`--tenant-gid-base` + the console user's id), so that

- no two placements on a machine share a user: one cannot signal, trace or read another's
  processes and private files, whatever tenant they belong to;
- the jobs of one tenant may share what is theirs (the File Storage share is group-owned,
  setgid, mode 2770), and nothing of another tenant's.

Allocation is machine-wide, not per agent (several agents may share a machine, as `make run`'s
two local nodes and the tests' do): a user is taken by holding an exclusive `flock` on
`<lock-dir>/<uid>.lock` for as long as the placement lives. The lock goes with the agent
process that held it; a user whose processes still run (an earlier agent's orphans, until they
are stopped) is not handed out again.

No passwd entries are written: the identities are numeric, like a container's. The command
gets USER, LOGNAME and HOME in its environment (nodeagent.environment), which is all that
Python's getpass and the frameworks look at.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_UIDS = range(1_900_000_000, 1_900_065_536)
DEFAULT_TENANT_GID_BASE = 2_000_000_000
DEFAULT_LOCK_DIR = Path("/run/simpleai-agent/uids")


class NoIdentityLeft(Exception):
    """Every user of the range is held by a running placement (or by an orphan's processes)."""


@dataclass
class JobIdentity:
    uid: int
    gid: int
    _lock: int | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """What the job's USER and LOGNAME say (no passwd entry exists for it)."""
        return f"job{self.uid}"

    def release(self) -> None:
        """The placement ended and its files were handed back: the user may serve another."""
        if self._lock is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock)
            self._lock = None


@dataclass(frozen=True)
class IdentityPool:
    uids: range = DEFAULT_UIDS
    tenant_gid_base: int = DEFAULT_TENANT_GID_BASE
    lock_dir: Path = DEFAULT_LOCK_DIR

    def tenant_gid(self, tenant_id: int) -> int:
        return self.tenant_gid_base + int(tenant_id)

    def allocate(self, key: str, tenant_id: int) -> JobIdentity:
        """A free user for the placement `key` (job/attempt/role), with its tenant's group.

        The search starts at a point derived from the key, so that the agents of a machine do
        not all contend for the range's first users."""
        self.lock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        busy = _uids_with_processes()
        start = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % len(self.uids)
        for offset in range(len(self.uids)):
            uid = self.uids[(start + offset) % len(self.uids)]
            if uid in busy:
                continue
            fd = os.open(self.lock_dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, f"{key}\n".encode())  # who holds it, for an operator reading the directory
            return JobIdentity(uid=uid, gid=self.tenant_gid(tenant_id), _lock=fd)
        raise NoIdentityLeft(f"all {len(self.uids)} job users of this machine ({self.uids.start}-{self.uids.stop - 1}) are in use")


def _uids_with_processes() -> set[int]:
    """The real user of every live process (from /proc/PID/status)."""
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/status", encoding="ascii", errors="replace") as status:
                    for line in status:
                        if line.startswith("Uid:"):
                            found.add(int(line.split()[1]))
                            break
            except (OSError, ValueError, IndexError):
                continue
    return found


def parse_uid_range(text: str) -> range:
    """`START-END` (inclusive) → a range of users; refuses root and ranges that are too small."""
    start_text, sep, end_text = text.partition("-")
    if not sep or not start_text.strip().isdigit() or not end_text.strip().isdigit():
        raise ValueError(f"expected START-END, e.g. 1900000000-1900065535, not {text!r}")
    start, end = int(start_text), int(end_text)
    if start < 1000 or end < start:
        raise ValueError(f"job users must be a range above the system users (START ≥ 1000, START ≤ END), not {text!r}")
    if end >= 2**32 - 1:
        raise ValueError(f"user ids end at {2**32 - 2}")
    return range(start, end + 1)
