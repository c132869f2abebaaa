"""`NODEAGENT_TOKEN=… python -m nodeagent --console http://HOST:PORT [...]` (see docs/operator/nodes.md)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from .config import parse_config
from .gpus import GpuProbeError, open_backend
from .runtimes import make_runtime

EXIT_SETUP_FAILED = 1


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_config(argv)
    # read once; no build step or command started later inherits it (/proc/PID/environ keeps the
    # start-up copy, readable only by root and the agent's own user)
    os.environ.pop("NODEAGENT_TOKEN", None)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        gpus = open_backend(config.gpus, config.name, config.server_type)
    except GpuProbeError as exc:
        print(f"nodeagent: {exc}", file=sys.stderr)
        return EXIT_SETUP_FAILED
    from .sandbox import unavailable, why_unconfined

    isolate = config.runtime == "process" and not config.no_isolation
    if isolate:
        why = unavailable()
        if why:
            print(f"nodeagent: the process runtime runs each job as a Unix user of its own, in namespaces of its own, "
                  f"and cannot here: {why}. Run the agent as root, or pass --no-isolation on a single-user workstation "
                  "(every job then runs as the agent's user and can read its files and every other job's).",
                  file=sys.stderr)
            return EXIT_SETUP_FAILED
    try:
        runtime = make_runtime(config.runtime, gpus.real, node_name=config.name, identities=config.identities,
                               file_storage_root=config.file_storage_root, isolate=isolate, unconfined=why_unconfined(),
                               readable=[config.env_cache] if config.env_cache else [], pass_env=config.pass_env)
    except Exception as exc:  # the Docker SDK cannot reach the engine (DOCKER_HOST)
        print(f"nodeagent: the {config.runtime} runtime is not available: {exc}", file=sys.stderr)
        return EXIT_SETUP_FAILED
    from .agent import serve  # after the checks: a usage error answers without importing websockets

    return asyncio.run(serve(config, gpus, runtime))


if __name__ == "__main__":
    sys.exit(main())
