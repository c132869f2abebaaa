"""Runtimes: how a placement's command runs (`process` on the node, or `docker` in its image)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..jobusers import IdentityPool
from .base import Execution, ExitStatus, ImageError, LaunchSpec, Runtime


def make_runtime(name: str, real_gpus: bool, node_name: str = "", *, identities: IdentityPool | None = None,
                 file_storage_root: Path | None = None, isolate: bool = False, unconfined: str = "",
                 readable: Sequence[Path] = (), pass_env: Sequence[str] = ()) -> Runtime:
    """`isolate` (process runtime): each placement in a sandbox of its own (needs root); without
    it, commands run as the agent's user and their logs say why (`unconfined`). `readable`: more
    directories the sandboxed jobs read (the training environments)."""
    runtime: Runtime
    if name == "process":
        from ..sandbox import SandboxSettings
        from .process import ProcessRuntime

        sandbox = SandboxSettings(identities=identities or IdentityPool(), file_storage_root=file_storage_root,
                                  readable=tuple(readable), node_name=node_name) if isolate else None
        runtime = ProcessRuntime(real_gpus, sandbox=sandbox, unconfined=unconfined or "the agent runs without isolation")
    elif name == "docker":
        from .docker import DockerRuntime  # imports the Docker SDK only when asked for

        runtime = DockerRuntime(real_gpus, node_name=node_name, identities=identities, file_storage_root=file_storage_root)
    else:
        raise ValueError(f"unknown runtime {name!r}")
    runtime.pass_env = tuple(pass_env)
    return runtime


__all__ = ["Execution", "ExitStatus", "ImageError", "LaunchSpec", "Runtime", "make_runtime"]
