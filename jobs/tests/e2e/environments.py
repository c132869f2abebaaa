"""The training environments the end-to-end tests' node agents use, built once per machine.

The agents of the tests share one environment cache, `$SIMPLEAI_CACHE_DIR/environments`
(/var/cache/simpleai/environments by default, beside the container image cache), so the seeded
environments (migration 0007) are built the first time on a machine (about a minute: the torch
layer from local disk, the rest from the package index) and reused by every later run.
`python -m jobs.tests.e2e.environments` builds them before the suite (`.ci/run` calls it, so the
suite's time excludes it); the `env_cache` fixture does the same when they are missing.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from nodeagent import protocol
from nodeagent.envcache import EnvironmentCache


def cache_dir() -> Path:
    root = Path(os.environ.get("SIMPLEAI_CACHE_DIR", "/var/cache/simpleai"))
    try:
        root.mkdir(parents=True, exist_ok=True)
    except PermissionError:  # not root: the user's own cache
        root = Path.home() / ".cache" / "simpleai"
    return root / "environments"


def seeded_specs() -> list[protocol.TrainingEnvironment]:
    """The environments migration 0007 seeds, as a placement carries them."""
    from jobs.environments.seeds import ENVIRONMENTS

    labels = {"pytorch": "PyTorch", "deepspeed": "DeepSpeed"}
    return [
        protocol.TrainingEnvironment(
            name=name, framework=framework, framework_label=labels[framework], version=version,
            requirements=[line for line in requirements.splitlines() if line.strip()], image="",
        )
        for name, framework, version, requirements, _ in ENVIRONMENTS
    ]


def node_cache(root: Path | None = None) -> EnvironmentCache:
    """The cache as the tests' agents use it: nodes with simulated GPUs, so CPU nodes."""
    return EnvironmentCache(root or cache_dir(), cpu_node=True)


class PrintLog:
    def info(self, text: str) -> None:
        print(f"[INFO] {text}", flush=True)

    def warning(self, text: str) -> None:
        print(f"[WARN] {text}", flush=True)


async def _ensure(cache: EnvironmentCache) -> None:
    for spec in seeded_specs():
        await cache.prepare(spec, PrintLog())


def ensure_environments(root: Path | None = None) -> Path:
    root = root or cache_dir()
    asyncio.run(_ensure(node_cache(root)))
    return root


@pytest.fixture(scope="session")
def env_cache() -> Path:
    """The agents' shared environment cache, with the seeded environments built."""
    return ensure_environments()


def main() -> int:
    started = time.monotonic()
    root = ensure_environments()
    print(f"training environments ready in {time.monotonic() - started:.1f} s ({root})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
