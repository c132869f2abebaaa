"""Runtimes: how a placement's command runs (`process` on the node, or `docker` in its image)."""

from __future__ import annotations

from .base import Execution, ExitStatus, ImageError, LaunchSpec, Runtime


def make_runtime(name: str, real_gpus: bool, node_name: str = "") -> Runtime:
    if name == "process":
        from .process import ProcessRuntime

        return ProcessRuntime(real_gpus)
    if name == "docker":
        from .docker import DockerRuntime  # imports the Docker SDK only when asked for

        return DockerRuntime(real_gpus, node_name=node_name)
    raise ValueError(f"unknown runtime {name!r}")


__all__ = ["Execution", "ExitStatus", "ImageError", "LaunchSpec", "Runtime", "make_runtime"]
