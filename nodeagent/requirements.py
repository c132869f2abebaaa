"""A project's requirements.txt, installed on top of the job's training environment (an overlay).

When the workdir holds a `requirements.txt` at its root, the process runtime makes an overlay
environment: a virtual environment whose site-packages adds the framework environment's (a .pth
file calls `site.addsitedir` on it, so its own .pth files, the shared torch layer's among them,
count too). pip installs into the overlay only what the framework environment lacks; the
framework's pins are passed as constraints, so a requirement can never replace torch (pip says
so instead). The framework's programs (torchrun, deepspeed, ...) get scripts of the overlay's own
Python, so the workers they start see the overlay's packages too.

    <env-cache>/overlays/<key>/                       the overlay (a venv)
    <env-cache>/overlays/<key>/simpleai-overlay.json  written last: the overlay is complete
    key = sha256(tenant, requirements.txt, the framework environment, local --find-links dirs)

It is cached per node and per tenant (a build runs the tenant's code: setup.py of an sdist, a
local wheel; another tenant with the same file must not get what it left). pip never runs as
root: under the sandbox it runs in a sandbox of its own as the placement's job user (the same
isolation as the command), without the sandbox as the agent's own user. A failed install fails
the placement with pip's own error lines (`requirements`), not a stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from .envcache import LAYER_PTH, MANIFEST, PROGRESS_PREFIXES, PreparedEnvironment
from .nodecache import JobLog, link_console_scripts, node_lock, secure_tree, site_packages
from .protocol import Placement

REQUIREMENTS = "requirements.txt"
OVERLAY_MANIFEST = "simpleai-overlay.json"
BASE_PTH = "_simpleai_framework.pth"
TAIL_LINES = 30
_FIND_LINKS = re.compile(r"^\s*(?:-f|--find-links)(?:\s+|=)(\S+)", re.MULTILINE)

# runs pip as the job's user: (placement, directory, command, env, line sink) → exit code
BuildRunner = Callable[[Placement, Path, str, dict[str, str], Callable[[str], None]], Awaitable[int]]


class RequirementsFailed(Exception):
    """requirements.txt could not be installed; the message holds pip's error lines."""


@dataclass(frozen=True)
class PreparedOverlay:
    path: Path
    cached: bool
    seconds: float
    user_base: bool = False  # a PYTHONUSERBASE for the job's image (the Docker runtime), not a venv

    def activate(self, env: dict[str, str]) -> dict[str, str]:
        if self.user_base:  # the container sees the path where it mounts it (runtimes.container_spec)
            return {**env, "PYTHONUSERBASE": str(self.path)}
        bin_dir = str(self.path / "bin")
        rest = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p != bin_dir]
        return {**env, "PATH": os.pathsep.join([bin_dir, *rest]), "VIRTUAL_ENV": str(self.path)}


def local_find_links(text: str, project: Path) -> list[Path]:
    """The project's own directories a requirements file names with -f/--find-links (pip reads
    them relative to the file): their contents belong in the cache key."""
    found = []
    for value in _FIND_LINKS.findall(text):
        if "://" in value and not value.startswith("file://"):
            continue
        path = (project / value.removeprefix("file://")).resolve()
        if path.is_relative_to(project.resolve()) and path.is_dir():
            found.append(path)
    return found


def digest_dirs(dirs: list[Path]) -> str:
    digest = hashlib.sha256()
    for folder in dirs:
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
            digest.update(f"{path.relative_to(folder)}\0{path.stat().st_size}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def overlay_key(tenant: str, requirements: str, base: str, local: str) -> str:
    text = json.dumps({"tenant": tenant, "requirements": requirements, "base": base, "local": local,
                       "python": f"{sys.version_info.major}.{sys.version_info.minor}"}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def pip_error(lines: list[str]) -> str:
    """pip's own words for why it failed: its ERROR lines (and, for a conflict, what caused it), else its last lines."""
    errors = [line.strip() for line in lines if (line.lstrip().startswith(("ERROR", "error:")) or "Error:" in line)
              and "ResolutionImpossible: for help" not in line]
    cause: list[str] = []
    for index, line in enumerate(lines):
        if line.strip() == "The conflict is caused by:":
            for following in lines[index + 1:]:
                if not following.startswith(" ") or not following.strip():
                    break
                cause.append(following.strip())
    if cause:
        errors.append("The conflict is caused by: " + "; ".join(cause))
    chosen = errors or [line.strip() for line in lines if line.strip()]
    return " | ".join(chosen[-4:]) or "pip printed nothing"


class OverlayCache:
    def __init__(self, root: Path) -> None:
        self.root = root

    async def prepare(self, project: Path, base: PreparedEnvironment | None, pins: list[str], tenant: str,
                      placement: Placement, run_build: BuildRunner, log: JobLog,
                      inherited: dict[str, str] | None = None, hold: Callable[[Path], None] = lambda _: None) -> PreparedOverlay:
        """The overlay for the project's requirements.txt: from the cache, or built now
        (RequirementsFailed with pip's words). `inherited`: what the job's command would get of
        the agent's environment (its allow-list and the operator's --pass-env names: a proxy, a
        package index), which pip gets too; pip also reads the node's /etc/pip.conf."""
        started = time.monotonic()
        text = (project / REQUIREMENTS).read_text(errors="replace")
        base_path = base.path if base is not None else Path(sys.prefix)
        base_record = ""
        with contextlib.suppress(OSError):
            base_record = (base_path / MANIFEST).read_text()
        local = await asyncio.to_thread(digest_dirs, local_find_links(text, project))
        key = overlay_key(tenant, text, f"{base_path}\0{base_record}", local)
        entry = self.root / "overlays" / key
        for folder, mode in ((self.root, 0o755), (self.root / "overlays", 0o755), (self.root / "locks", 0o700)):
            folder.mkdir(mode=mode, parents=True, exist_ok=True)
        await asyncio.to_thread(hold, entry)  # in use from before the look (nodeagent.cachecap)
        if (entry / OVERLAY_MANIFEST).is_file():
            log.info(f"requirements.txt: installed on this node already (overlay {key[:12]}), reused")
            return PreparedOverlay(entry, True, time.monotonic() - started)
        async with self._locked(key, log):
            if (entry / OVERLAY_MANIFEST).is_file():
                log.info("requirements.txt: installed by another job on this node meanwhile, reused")
                return PreparedOverlay(entry, True, time.monotonic() - started)
            over = base.name if base is not None else "the node's own Python"
            log.info(f"requirements.txt: installing it on top of {over} (once per node; later jobs reuse it)")
            try:
                await self._build(entry, project, base_path, base_record, pins, placement, run_build, log,
                                  inherited if inherited is not None else {"PATH": os.environ.get("PATH", os.defpath)})
            except BaseException:
                await asyncio.to_thread(shutil.rmtree, entry, True)
                raise
            seconds = time.monotonic() - started
            log.info(f"requirements.txt installed ({seconds:.1f} s; cached for later jobs)")
            return PreparedOverlay(entry, False, seconds)

    async def _build(self, entry: Path, project: Path, base_path: Path, base_record: str, pins: list[str],
                     placement: Placement, run_build: BuildRunner, log: JobLog, inherited: dict[str, str]) -> None:
        await asyncio.to_thread(shutil.rmtree, entry, True)
        python = base_path / "bin" / "python"
        if not python.exists():
            python = Path(sys.executable)
        process = await asyncio.create_subprocess_exec(
            str(python), "-m", "venv", "--without-pip", str(entry), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, umask=0o022)
        output, _ = await process.communicate()
        if process.returncode != 0:
            raise RequirementsFailed(f"the overlay environment could not be made: {output.decode(errors='replace')[-300:]}")
        site = site_packages(entry)
        base_site = site_packages(base_path)
        # the framework's packages (and, through its own .pth files, its torch layer) after the overlay's
        (site / BASE_PTH).write_text(f"import site; site.addsitedir({str(base_site)!r})\n")
        link_console_scripts(base_site, entry / "bin")
        with contextlib.suppress(ValueError, OSError):
            layer = json.loads(base_record).get("torch_layer") if base_record else ""
            if layer and (Path(layer) / LAYER_PTH).parent.is_dir():
                link_console_scripts(Path(layer), entry / "bin")
        await asyncio.to_thread(shutil.copytree, project, entry / ".src", symlinks=True)
        (entry / ".src" / ".simpleai-constraints.txt").write_text("".join(f"{pin}\n" for pin in pins))
        command = (f"python -m pip install --disable-pip-version-check --no-input --no-warn-script-location "
                   f"-r {shlex.quote(str(entry / '.src' / REQUIREMENTS))} "
                   f"-c {shlex.quote(str(entry / '.src' / '.simpleai-constraints.txt'))}")
        env = {"LANG": "C.UTF-8", **inherited,
               "PATH": os.pathsep.join([str(entry / "bin"), *inherited.get("PATH", os.defpath).split(os.pathsep)]),
               "VIRTUAL_ENV": str(entry), "PIP_PROGRESS_BAR": "off", "PIP_NO_CACHE_DIR": "1", "PYTHONUNBUFFERED": "1",
               "TMPDIR": "/tmp"}
        tail: deque[str] = deque(maxlen=TAIL_LINES)

        def line(text: str) -> None:
            tail.append(text)
            if text.lstrip().startswith(PROGRESS_PREFIXES):
                log.info(f"  {text.strip()}")

        try:
            code = await run_build(placement, entry, command, env, line)
        except Exception as exc:  # no job user left, the sandbox refused: said as a requirements failure
            raise RequirementsFailed(f"requirements.txt could not be installed: pip could not be started: {exc}") from exc
        if code != 0:
            raise RequirementsFailed(f"requirements.txt could not be installed (pip exit code {code}): {pip_error(list(tail))}")
        for leftover in (".src", ".home", ".build-output"):
            await asyncio.to_thread(shutil.rmtree, entry / leftover, True)
        await asyncio.to_thread(secure_tree, entry)  # the agent's, read-only to jobs: before the manifest
        (entry / OVERLAY_MANIFEST).write_text(json.dumps({"base": str(base_path), "prepared_at": time.time()}))

    def _locked(self, key: str, log: JobLog) -> contextlib.AbstractAsyncContextManager[None]:
        return node_lock(self.root / "locks" / f"overlay-{key}.lock", log,
                         "Waiting: another job on this node is installing the same requirements.txt")
