"""Which Docker Engine API answers on this node (`simpleai-agent` picks its runtime by it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def find_engine(environ: Mapping[str, str] | None = None, timeout: float = 3.0) -> tuple[str, str] | None:
    """The first Docker Engine API that answers: `(url, "Docker Engine 27.1" | "Podman Engine 4.3.1")`.

    `$DOCKER_HOST` when it is set (and only it), else Docker's socket, then rootful Podman's.
    """
    import docker

    environ = os.environ if environ is None else environ
    if environ.get("DOCKER_HOST"):
        candidates = [environ["DOCKER_HOST"]]
    else:
        candidates = ["unix:///var/run/docker.sock", "unix:///run/podman/podman.sock"]
    for url in candidates:
        if url.startswith("unix://") and not Path(url.removeprefix("unix://")).exists():
            continue
        try:
            client = docker.from_env(environment={**environ, "DOCKER_HOST": url}, timeout=int(timeout))
        except Exception:
            continue
        try:
            version = client.version()
        except Exception:
            continue
        finally:
            client.close()
        components = version.get("Components") or [{}]
        product = components[0].get("Name") or "Docker Engine API"
        if product == "Engine":
            product = "Docker Engine"
        return url, f"{product} {version.get('Version', '')}".strip()
    return None
