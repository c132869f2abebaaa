"""`python -m nodeagent --console http://HOST:PORT --token TOKEN [...]` (see README, "Node agents")."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence

from .config import parse_config
from .gpus import GpuProbeError, open_backend
from .runtimes import make_runtime

EXIT_SETUP_FAILED = 1


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_config(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        gpus = open_backend(config.gpus, config.name, config.server_type)
    except GpuProbeError as exc:
        print(f"nodeagent: {exc}", file=sys.stderr)
        return EXIT_SETUP_FAILED
    try:
        runtime = make_runtime(config.runtime, gpus.real, node_name=config.name)
    except Exception as exc:  # the Docker SDK cannot reach the engine (DOCKER_HOST)
        print(f"nodeagent: the {config.runtime} runtime is not available: {exc}", file=sys.stderr)
        return EXIT_SETUP_FAILED
    from .agent import serve  # after the checks: a usage error answers without importing websockets

    return asyncio.run(serve(config, gpus, runtime))


if __name__ == "__main__":
    sys.exit(main())
