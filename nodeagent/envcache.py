"""Training environments on a node: Python environments built from pinned lists, built once, cached.

A placement names its training environment (protocol.TrainingEnvironment: the job's framework and
version, with a pinned requirement list). Under the process runtime the agent makes that list a
virtual environment on the node the first time a job needs it, and every later job of any user
reuses it — like an image that is pulled once. Layout under `--env-cache DIR` (by default shared by
every agent of this machine's user, so nodes on one machine build each entry once):

    DIR/layers/torch-<version>-<python>/     torch and its dependencies, `pip install --target`,
                                             once per torch version; environments see it through
                                             a .pth file, so torch is neither copied nor reinstalled
    DIR/envs/<key>/                          a venv; key = sha256(python, the pinned list)[:16]
    DIR/envs/<key>/simpleai-environment.json written last: the environment is complete
    DIR/locks/<entry>.lock                   flock: one build per entry at a time (two jobs, two
                                             agents); a waiting job says so in its log

Builds use pip with `--no-build-isolation` (an sdist such as deepspeed builds against the layer's
torch, not a freshly downloaded one) and DS_BUILD_OPS=0 (DeepSpeed's ops compile on first use).
On a CPU node (simulated GPUs) DeepSpeed's shared-memory collective op, which its CPU accelerator
builds before any training step, is compiled into the environment while it is built
(DS_BUILD_SHM_COMM=1): otherwise every job would compile it on its first run (a minute and more)
into ~/.cache/torch_extensions, where a build killed half-way leaves a lock that makes every
later DeepSpeed job on the machine wait forever.
The list pins torch and the layer satisfies it, so pip can never pull another torch: a package
that wants a different one fails the build with pip's own message instead.

Only the agent writes the cache; jobs read it (the process runtime's sandbox also binds it
read-only into every job). Everything in it is the agent's user's, directories 0755, files 0644
(0755 when executable), the locks 0700 (a job could otherwise hold a build up); a complete entry
says so with `simpleai-permissions`. A cache that an older agent built (other owners, a
group-writable file) is put right the first time an agent uses each entry. The lock and the
permissions are nodeagent.nodecache's, which the requirements overlay shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .nodecache import (
    JobLog,
    link_console_scripts,
    node_lock,
    secure_once,
    secure_path,
    secure_tree,
    site_packages,
)
from .protocol import TrainingEnvironment

MANIFEST = "simpleai-environment.json"
LAYER_PTH = "_simpleai_torch_layer.pth"
BUILD_TOOLS = ("wheel==0.45.1",)  # bdist_wheel for sdists built without isolation (deepspeed)
# pip's lines worth showing in the job's log while an environment is built (the rest is noise)
PROGRESS_PREFIXES = ("Collecting", "Downloading", "Building", "Created wheel", "Installing collected",
                     "Successfully", "Requirement already satisfied: torch", "ERROR", "error:")
TAIL_LINES = 25  # pip's last lines kept for the failure message
_PIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+")
_FROM = re.compile(r" \(from [^)]*(\)|$).*$")  # "Collecting x (from y->-r /long/path (line 3))": the package is enough


class EnvironmentFailed(Exception):
    """An environment could not be prepared; the message says which step failed and pip's words."""


@dataclass(frozen=True)
class PreparedEnvironment:
    name: str
    path: Path
    cached: bool  # True: it was complete on the node already
    seconds: float  # spent preparing (or checking) it for this job

    @property
    def bin_dir(self) -> Path:
        return self.path / "bin"

    def activate(self, env: dict[str, str]) -> dict[str, str]:
        """The command's environment with this environment's programs first on PATH."""
        rest = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p != str(self.bin_dir)]
        return {**env, "PATH": os.pathsep.join([str(self.bin_dir), *rest]), "VIRTUAL_ENV": str(self.path),
                "SIMPLEAI_ENVIRONMENT": self.name}


def base_python() -> str:
    """The interpreter environments are made from: the agent's base Python, not its own venv."""
    return getattr(sys, "_base_executable", None) or sys.executable


def environment_key(spec: TrainingEnvironment, python: str) -> str:
    text = json.dumps({"python": python, "requirements": sorted(spec["requirements"])}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def pinned_version(requirements: list[str], package: str) -> str | None:
    """The version `package` (extras allowed, any case) is pinned to in the list, or None."""
    for line in requirements:
        name, _, version = line.partition("==")
        if name.split("[", 1)[0].strip().lower() == package:
            return version.strip()
    return None


def torch_pin(requirements: list[str]) -> str | None:
    return pinned_version(requirements, "torch")


def needs_cpu_ops(spec: TrainingEnvironment, cpu_node: bool) -> bool:
    """DeepSpeed on a CPU node: its CPU accelerator's collective op is built with the environment."""
    return cpu_node and pinned_version(spec["requirements"], "deepspeed") is not None


class EnvironmentCache:
    def __init__(self, root: Path, python: str | None = None, cpu_node: bool = False) -> None:
        self.root = root
        self.python = python or base_python()
        self.tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
        self.cpu_node = cpu_node

    def entry(self, spec: TrainingEnvironment) -> Path:
        # a build with the CPU op differs from one without: a GPU node never reuses it
        variant = " cpu-ops" if needs_cpu_ops(spec, self.cpu_node) else ""
        return self.root / "envs" / environment_key(spec, f"{self.python} {self.tag}{variant}")

    def manifest(self, spec: TrainingEnvironment) -> dict[str, Any] | None:
        """The complete environment's record, or None (not built, half built, or its layer is gone)."""
        try:
            record = json.loads((self.entry(spec) / MANIFEST).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict):
            return None  # not a record this agent wrote
        if record.get("torch_layer") and not (Path(record["torch_layer"]) / MANIFEST).is_file():
            return None
        return record

    async def prepare(self, spec: TrainingEnvironment, log: JobLog) -> PreparedEnvironment:
        """The environment ready to use: from the cache, or built now (raises EnvironmentFailed)."""
        started = time.monotonic()
        label = f"{spec['name']} ({spec.get('framework_label') or spec['framework']} {spec['version']})"
        path = self.entry(spec)
        self._secure_roots()
        ready = self.manifest(spec)
        if ready is not None:
            await asyncio.to_thread(_secure_entry, path, ready)
            log.info(f"Training environment {label}: cached on this node (prepared {_ago(ready.get('prepared_at'))} "
                     f"in {ready.get('seconds', 0):.0f} s), reused")
            return PreparedEnvironment(spec["name"], path, True, time.monotonic() - started)
        async with self._locked(f"env-{path.name}", log, f"the training environment {spec['name']}"):
            ready = self.manifest(spec)
            if ready is not None:  # built by the job we waited for
                await asyncio.to_thread(_secure_entry, path, ready)
                log.info(f"Training environment {label}: prepared by another job on this node meanwhile, reused")
                return PreparedEnvironment(spec["name"], path, True, time.monotonic() - started)
            log.info(f"Training environment {label}: preparing it on this node for the first time "
                     f"({', '.join(spec['requirements'])}); later jobs reuse it")
            try:
                await self._build(spec, path, log)
            except BaseException:
                shutil.rmtree(path, ignore_errors=True)  # never leave half an environment behind
                raise
            seconds = time.monotonic() - started
            log.info(f"Training environment {spec['name']} ready (prepared in {seconds:.1f} s; cached for later jobs)")
            return PreparedEnvironment(spec["name"], path, False, seconds)

    # -- building --------------------------------------------------------------------------

    async def _build(self, spec: TrainingEnvironment, path: Path, log: JobLog) -> None:
        started = time.monotonic()
        shutil.rmtree(path, ignore_errors=True)  # what a crashed build left
        requirements = list(spec["requirements"])
        odd = [line for line in requirements if not _PIN.fullmatch(line)]
        if odd:  # the console sends exact pins only; a pip option in a requirements file would be obeyed
            raise EnvironmentFailed(f"the list holds lines that are not exact pins: {', '.join(map(repr, odd))}")
        torch_version = torch_pin(requirements)
        layer = await self._layer(torch_version, log) if torch_version else None
        # pip comes in a step of its own: venv keeps what ensurepip printed to itself on a failure
        await self._run([self.python, "-m", "venv", "--without-pip", str(path)], log, "creating the virtual environment",
                        quiet=True)
        await self._run([str(path / "bin" / "python"), "-m", "ensurepip", "--upgrade", "--default-pip"], log,
                        "installing pip into the environment", quiet=True)
        site = site_packages(path)
        if layer is not None:
            (site / LAYER_PTH).write_text(f"{layer}\n")
            link_console_scripts(layer, path / "bin")
        python = str(path / "bin" / "python")
        pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
        await self._run([*pip, *BUILD_TOOLS], log, "installing the build tools", quiet=True)
        listing = path / "simpleai-requirements.txt"
        listing.write_text("\n".join(requirements) + "\n")
        log.info(f"Installing {len(requirements)} pinned packages with pip (progress below)")
        await self._run([*pip, "--no-build-isolation", "-r", str(listing)], log, "pip install", env={"DS_BUILD_OPS": "0"})
        if needs_cpu_ops(spec, self.cpu_node):
            deepspeed = f"deepspeed=={pinned_version(requirements, 'deepspeed')}"
            log.info("DeepSpeed on a CPU node: building it again with its shared-memory collective op compiled in")
            # pip's cache of built wheels does not know the build variables: --no-cache-dir builds anew
            await self._run([*pip, "--no-build-isolation", "--no-deps", "--force-reinstall", "--no-cache-dir", deepspeed],
                            log, "building DeepSpeed's CPU op", env={"DS_BUILD_OPS": "0", "DS_BUILD_SHM_COMM": "1",
                                                                     "DS_ACCELERATOR": "cpu"})
        versions = await self._check(python, requirements, log)
        await asyncio.to_thread(secure_tree, path)  # before the manifest: complete means safe to share
        (path / MANIFEST).write_text(json.dumps({
            "name": spec["name"], "framework": spec["framework"], "version": spec["version"],
            "requirements": requirements, "python": self.python, "torch_layer": str(layer or ""),
            "versions": versions, "prepared_at": time.time(), "seconds": round(time.monotonic() - started, 1),
        }, indent=1))

    async def _layer(self, version: str, log: JobLog) -> Path:
        """torch==version and its dependencies in the shared layer (installed once per node)."""
        layer = self.root / "layers" / f"torch-{version}-{self.tag}"
        if (layer / MANIFEST).is_file():
            log.info(f"torch {version}: from this node's shared layer (not copied into the environment)")
            await asyncio.to_thread(secure_once, layer)
            return layer
        async with self._locked(f"layer-{layer.name}", log, f"the torch {version} layer"):
            if (layer / MANIFEST).is_file():
                return layer
            log.info(f"torch {version}: installing it into this node's shared layer (once per node; every environment uses it)")
            building = layer.with_name(f"{layer.name}.building")
            shutil.rmtree(building, ignore_errors=True)
            await self._run([self.python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                             "--target", str(building), f"torch=={version}"], log, f"installing torch {version}")
            await asyncio.to_thread(secure_tree, building)
            (building / MANIFEST).write_text(json.dumps({"torch": version, "prepared_at": time.time()}))
            shutil.rmtree(layer, ignore_errors=True)
            os.replace(building, layer)  # a plain directory of packages: safe to rename when complete
            return layer

    async def _check(self, python: str, requirements: list[str], log: JobLog) -> dict[str, str]:
        """Every pinned package imports at its pinned version (pip's word is not taken for it)."""
        names = [line.split("==", 1)[0].split("[", 1)[0] for line in requirements]
        script = ("import importlib.metadata as m, json, sys; "
                  "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))")
        output = await self._run([python, "-c", script, *names], log, "checking the installed versions", quiet=True)
        versions = json.loads(output.strip().splitlines()[-1])
        if not isinstance(versions, dict):
            raise EnvironmentFailed(f"the version check printed {output.strip()[-200:]!r}, not a JSON object")
        wrong = [f"{line} (found {versions.get(name)})" for line, name in zip(requirements, names, strict=True)
                 if versions.get(name, "").split("+", 1)[0] != line.split("==", 1)[1].strip()]
        if wrong:
            raise EnvironmentFailed(f"the installed versions differ from the list: {', '.join(wrong)}")
        log.info("Environment check: " + ", ".join(f"{name} {version}" for name, version in versions.items()))
        return versions

    async def _run(self, args: list[str], log: JobLog, step: str, env: dict[str, str] | None = None,
                   quiet: bool = False) -> str:
        """Run one build step; its progress lines go to the job's log; raises with pip's last lines."""
        process = await asyncio.create_subprocess_exec(
            *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PIP_PROGRESS_BAR": "off", "PYTHONUNBUFFERED": "1", **(env or {})},
            start_new_session=True, umask=0o022,  # readable by jobs, writable by the agent alone
        )
        tail: deque[str] = deque(maxlen=TAIL_LINES)
        output: list[str] = []
        assert process.stdout is not None
        try:
            async for raw in process.stdout:
                line = raw.decode("utf-8", errors="replace").rstrip()
                if not line:
                    continue
                tail.append(line)
                output.append(line)
                if not quiet and line.lstrip().startswith(PROGRESS_PREFIXES):
                    log.info(f"  {_FROM.sub('', line.strip())}")
            code = await process.wait()
        except asyncio.CancelledError:  # the job was stopped while its environment was being built
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
            await process.wait()
            raise
        if code != 0:
            errors = [line.strip() for line in tail if "ERROR" in line or "error" in line.lower()]
            detail = (errors or [line.strip() for line in tail])[-3:]
            raise EnvironmentFailed(f"{step} failed (exit code {code}): {' | '.join(detail)}")
        return "\n".join(output)

    def _secure_roots(self) -> None:
        """The cache's own directories: readable by jobs, the locks not even that."""
        for folder, mode in ((self.root, 0o755), (self.root / "envs", 0o755), (self.root / "layers", 0o755),
                             (self.root / "locks", 0o700)):
            folder.mkdir(parents=True, exist_ok=True)
            secure_path(str(folder), os.geteuid(), os.getegid(), directory_mode=mode)

    def _locked(self, name: str, log: JobLog, what: str) -> contextlib.AbstractAsyncContextManager[None]:
        return node_lock(self.root / "locks" / f"{name}.lock", log, f"Waiting: another job on this node is preparing {what}")


def _secure_entry(path: Path, record: dict[str, Any]) -> None:
    """A complete entry (and its torch layer) made safe to share, if an older agent left it otherwise."""
    secure_once(path)
    if record.get("torch_layer"):
        secure_once(Path(record["torch_layer"]))


def _ago(timestamp: Any) -> str:
    if not isinstance(timestamp, (int, float)):
        return "earlier"
    seconds = max(0.0, time.time() - timestamp)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.0f} h ago"
