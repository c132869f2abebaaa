"""Control groups: what the node has, and one group per placement.

Detected once at agent start, from /proc/self/mounts and /proc/self/cgroup:

- cgroup v2 with controllers (a unified hierarchy whose cgroup.controllers lists memory, cpu or
  pids): a placement's group is `<the agent's own group>/simpleai/job<uid>`, with memory, cpu and
  pids enabled where the agent's group may delegate them. `cgroup.kill` ends it as one.
- else cgroup v1: every hierarchy that has memory, cpu, cpuacct, pids, freezer or devices; a
  placement's group is `<the agent's own group in it>/simpleai/job<uid>` in each. A stop freezes
  the freezer group, SIGKILLs every process in it and thaws it (nothing forks meanwhile).
- else none: the placement still has its PID namespace (its init's death ends everything of
  it), but no accounting; the job's log says so.

The groups are made under the agent's own (never above it): a limit the operator put on the
agent covers its jobs too. `job<uid>` is unique on the machine while the placement lives
(nodeagent.jobusers holds the user for it). The launcher joins the groups before anything of
the command starts (nodeagent/sandbox/launch.py); the agent removes them after the placement.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

V1_CONTROLLERS = ("memory", "cpu", "cpuacct", "pids", "freezer", "devices")
V2_CONTROLLERS = ("memory", "cpu", "pids")
GROUP_PARENT = "simpleai"
FREEZE_WAIT = 2.0  # seconds for a freezer group to report FROZEN
EMPTY_WAIT = 5.0  # seconds for killed processes to leave a group before it is removed
POLL = 0.02


@dataclass(frozen=True)
class Usage:
    peak_memory_bytes: int | None
    cpu_seconds: float | None

    def describe(self) -> str:
        parts = []
        if self.peak_memory_bytes is not None:
            parts.append(f"peak memory {_size(self.peak_memory_bytes)}")
        if self.cpu_seconds is not None:
            parts.append(f"CPU time {self.cpu_seconds:.1f} s")
        return ", ".join(parts)


@dataclass(frozen=True)
class CgroupSupport:
    """What the node offers. `bases`: where placement groups are made, per hierarchy (v1: each
    controller's hierarchy; v2: the one unified hierarchy under the name "unified")."""

    version: int  # 2, 1 or 0 (none)
    bases: dict[str, Path] = field(default_factory=dict)  # controller (v1) or "unified" (v2) → base directory
    controllers: tuple[str, ...] = ()
    note: str = ""  # what is missing, for the job's log

    def describe(self) -> str:
        if self.version == 0:
            return f"no cgroup of its own ({self.note})"
        names = ", ".join(name for name in self.controllers if name != "cpuacct")
        text = f"cgroup v{self.version} ({names})" if names else f"cgroup v{self.version}"
        return f"{text}; {self.note}" if self.note else text

    def group(self, name: str) -> PlacementCgroup:
        if self.version == 2:
            return PlacementCgroup(2, {"unified": self.bases["unified"] / name})
        dirs: dict[str, Path] = {}
        for controller, base in self.bases.items():
            dirs[controller] = base / name
        return PlacementCgroup(self.version, dirs)


def detect(mounts: str | None = None, own: str | None = None, root: Path = Path("/")) -> CgroupSupport:
    """What this node has (see the module's docstring); `mounts`/`own` are /proc/self/mounts and
    /proc/self/cgroup (given in tests), `root` prefixes every path read."""
    mounts = _read(root / "proc/self/mounts") if mounts is None else mounts
    own = _read(root / "proc/self/cgroup") if own is None else own
    paths = _own_paths(own)
    v1: dict[str, Path] = {}
    unified: Path | None = None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        mount_point, kind, options = Path(_unescape(fields[1])), fields[2], fields[3].split(",")
        if kind == "cgroup2" and unified is None:
            unified = mount_point
        elif kind == "cgroup":
            for controller in V1_CONTROLLERS:
                if controller in options and controller not in v1:
                    hierarchy = ",".join(sorted(o for o in options if o in V1_CONTROLLERS or o.startswith("name=")))
                    own_path = paths.get(hierarchy) or paths.get(controller) or "/"
                    v1[controller] = _under(root, mount_point, own_path) / GROUP_PARENT
    if unified is not None:
        available = _read(_under(root, unified, "/") / "cgroup.controllers").split()
        if any(name in available for name in V2_CONTROLLERS):
            base = _under(root, unified, paths.get("", "/")) / GROUP_PARENT
            return CgroupSupport(2, {"unified": base}, tuple(n for n in V2_CONTROLLERS if n in available))
    if v1:
        v1 = {name: v1[name] for name in V1_CONTROLLERS if name in v1}
        present = tuple(v1)
        absent = [name for name in V1_CONTROLLERS if name not in v1 and name != "cpuacct"]
        note = f"no {', '.join(absent)} controller on this node" if absent else ""
        return CgroupSupport(1, v1, present, note)
    return CgroupSupport(0, note="this node mounts no cgroup hierarchy with controllers: no accounting, no device "
                                 "isolation; a stop still ends everything through the PID namespace")


def _own_paths(text: str) -> dict[str, str]:
    """/proc/self/cgroup → {hierarchy's controllers, sorted and joined: path}; v2's is ""."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if not number or not path:
            continue
        names = sorted(controllers.split(",")) if controllers else []
        paths[",".join(names)] = path
        for name in names:
            paths.setdefault(name, path)
    return paths


def _under(root: Path, mount_point: Path, path: str) -> Path:
    return root / str(mount_point).lstrip("/") / path.lstrip("/")


def _unescape(text: str) -> str:
    return text.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@dataclass
class PlacementCgroup:
    version: int
    dirs: dict[str, Path]  # controller (v1) or "unified" (v2) → the placement's group

    @property
    def directories(self) -> list[Path]:
        return list(dict.fromkeys(self.dirs.values()))  # cpu and cpuacct may share one hierarchy

    def create(self) -> None:
        if self.version == 2:
            _enable_v2_controllers(self.dirs["unified"])
        for directory in self.directories:
            if directory.is_dir():  # left by an agent that crashed: never inherit its device rules
                if _procs(directory):
                    raise OSError(f"the cgroup {directory} still holds processes")
                directory.rmdir()
            directory.mkdir(parents=True)

    def controllers(self) -> list[str]:
        """The controllers the placement's group has (v2: those delegated to it)."""
        if self.version == 2:
            return _read(self.dirs["unified"] / "cgroup.controllers").split()
        return list(self.dirs)

    def procs_files(self) -> list[str]:
        return [str(directory / "cgroup.procs") for directory in self.directories]

    def deny_devices(self, rules: list[str]) -> bool:
        """v1 devices controller: write each rule (`c MAJOR:MINOR rwm`) to devices.deny; False
        where the node cannot (no devices hierarchy, or cgroup v2)."""
        directory = self.dirs.get("devices") if self.version == 1 else None
        if directory is None:
            return False
        for rule in rules:
            (directory / "devices.deny").write_text(rule)
        return True

    def pids(self) -> set[int]:
        found: set[int] = set()
        for directory in self.directories:
            found |= _procs(directory)
        return found

    def kill(self) -> None:
        """SIGKILL everything in the group, so that nothing escapes by forking meanwhile."""
        if self.version == 2:
            with contextlib.suppress(OSError):
                (self.dirs["unified"] / "cgroup.kill").write_text("1")
                return
        freezer = self.dirs.get("freezer")
        frozen = freezer is not None and _freeze(freezer)
        for _ in range(1 if frozen else 20):  # without a freezer a forking loop needs several rounds
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if freezer is not None:
            with contextlib.suppress(OSError):
                (freezer / "freezer.state").write_text("THAWED")  # the killed processes can die now

    def usage(self) -> Usage:
        if self.version == 2:
            unified = self.dirs["unified"]
            cpu = _stat_field(unified / "cpu.stat", "usage_usec")
            return Usage(_int(unified / "memory.peak"), cpu / 1e6 if cpu is not None else None)
        memory, cpuacct = self.dirs.get("memory"), self.dirs.get("cpuacct")
        nanoseconds = _int(cpuacct / "cpuacct.usage") if cpuacct else None
        return Usage(_int(memory / "memory.max_usage_in_bytes") if memory else None,
                     nanoseconds / 1e9 if nanoseconds is not None else None)

    def remove(self, wait: float = EMPTY_WAIT) -> bool:
        """Remove the groups once empty (killing what is left); False when one stays."""
        deadline = time.monotonic() + wait
        while self.pids() and time.monotonic() < deadline:
            self.kill()
            time.sleep(POLL * 5)
        removed = True
        for directory in self.directories:
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                removed = False
        return removed

    def marker(self) -> dict[str, object]:
        return {"version": self.version, "dirs": {name: str(path) for name, path in self.dirs.items()}}

    @classmethod
    def from_marker(cls, data: object) -> PlacementCgroup | None:
        if not isinstance(data, dict) or not isinstance(data.get("dirs"), dict):
            return None
        dirs = {str(name): Path(str(path)) for name, path in data["dirs"].items()}
        if not all(str(path).startswith("/sys/fs/cgroup/") and path.name.startswith("job") for path in dirs.values()):
            return None  # a marker is the agent's own file, but never act on a path it would not make
        return cls(int(data.get("version", 1)), dirs)


def _enable_v2_controllers(group: Path) -> None:
    """Let the placement's group have memory, cpu and pids where the agent's own group may
    delegate them (its cgroup.subtree_control; refused while it holds processes itself unless it
    is the root: then the group has none, and only cgroup.kill and cpu.stat)."""
    parent = group.parent
    parent.mkdir(exist_ok=True)
    for level in (parent.parent, parent):
        available = _read(level / "cgroup.controllers").split()
        wanted = " ".join(f"+{name}" for name in V2_CONTROLLERS if name in available)
        if wanted:
            with contextlib.suppress(OSError):
                (level / "cgroup.subtree_control").write_text(wanted)


def _freeze(freezer: Path) -> bool:
    try:
        (freezer / "freezer.state").write_text("FROZEN")
    except OSError:
        return False
    deadline = time.monotonic() + FREEZE_WAIT
    while time.monotonic() < deadline:
        if _read(freezer / "freezer.state").strip() == "FROZEN":
            return True
        time.sleep(POLL)
    return False


def _procs(directory: Path) -> set[int]:
    return {int(line) for line in _read(directory / "cgroup.procs").split() if line.isdigit()}


def _int(path: Path) -> int | None:
    text = _read(path).strip()
    return int(text) if text.isdigit() else None


def _stat_field(path: Path, name: str) -> int | None:
    for line in _read(path).splitlines():
        key, _, value = line.partition(" ")
        if key == name and value.strip().isdigit():
            return int(value)
    return None


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
