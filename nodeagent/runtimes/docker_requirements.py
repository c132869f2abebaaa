"""A project's requirements.txt under the Docker runtime: installed in a container of the job's image.

pip runs in a container of the job's own image, as a Unix user of the job's tenant (never root,
no capabilities, like the job's container), with `--user` into a per-node cache entry that is
then the job's PYTHONUSERBASE: the image's Python finds the packages in its user site, after the
image's own (pip installs only what the image lacks; the image's installed versions are
constraints, so a requirement never replaces the image's torch). An image without pip (a
minimal one) is lent the node's pip, read-only. The job's container mounts the entry read-only
at /simpleai/requirements.

    <env-cache>/overlays/<key>/                       PYTHONUSERBASE (lib/pythonX.Y/site-packages, bin)
    <env-cache>/overlays/<key>/simpleai-overlay.json  written last: the entry is complete
    key = sha256("image", tenant, requirements.txt, the image's id, local --find-links dirs)

The entries are the process runtime's overlays' neighbours (nodeagent.requirements): cached per
node and tenant, evicted under the node's cache cap (nodeagent.cachecap).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import shutil
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ..jobusers import JobIdentity
from ..nodecache import node_lock, secure_tree
from ..protocol import Placement
from ..requirements import (
    OVERLAY_MANIFEST,
    REQUIREMENTS,
    TAIL_LINES,
    PreparedOverlay,
    RequirementsFailed,
    digest_dirs,
    local_find_links,
    pip_error,
)
from .container_spec import CONTAINER_ROOT, REQUIREMENTS_IN_CONTAINER, container_labels, container_name, hand_back

PIP_IN_CONTAINER = CONTAINER_ROOT / "pip"
SOURCE = ".src"
# what pip may be told by the node's operator (--pass-env): an index, a proxy
PIP_NAMES = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
             "http_proxy", "https_proxy", "no_proxy")

# pip's own when the image has one, else the node's (lent read-only); the image's packages as
# constraints (never pip itself); --user: only what the image lacks goes into PYTHONUSERBASE
BUILD_SCRIPT = f"""set -e
PY=$(command -v python3 || command -v python) || {{ echo "ERROR: the image has no python3 or python"; exit 127; }}
if ! "$PY" -c 'import pip' 2>/dev/null; then
  export PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{PIP_IN_CONTAINER}"
  echo "the image has no pip: using the node's"
fi
"$PY" -m pip list --format=freeze 2>/dev/null | grep -v -i -E '^(pip|setuptools|wheel)==' > /tmp/constraints.txt || true
cd {REQUIREMENTS_IN_CONTAINER}/{SOURCE}
exec "$PY" -m pip install --user --no-input --disable-pip-version-check --no-warn-script-location \\
  -r {REQUIREMENTS} -c /tmp/constraints.txt
"""


class JobLog(Protocol):
    def info(self, text: str) -> None: ...

    def warning(self, text: str) -> None: ...


def image_overlay_key(tenant: str, requirements: str, image_id: str, local: str) -> str:
    text = json.dumps({"kind": "image", "tenant": tenant, "requirements": requirements, "image": image_id,
                       "local": local}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def lent_pip(root: Path) -> Path:
    """The node's pip package, copied once into the cache (what an image without pip is lent)."""
    import pip

    source = Path(pip.__file__).parent
    target = root / "pip-lent" / pip.__version__
    if not (target / "pip" / "__init__.py").is_file():
        staging = target.with_name(f".{target.name}.tmp")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(source, staging / "pip", ignore=shutil.ignore_patterns("__pycache__"))
        secure_tree(staging)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


class ImageRequirements:
    """Builds and caches the requirements entries of the Docker runtime's jobs."""

    def __init__(self, client: Any, wait_api: Any, node_name: str, allocate: Callable[[Placement, str], JobIdentity]) -> None:
        self.client, self.wait_api, self.node_name, self.allocate = client, wait_api, node_name, allocate

    async def prepare(self, project: Path, placement: Placement, tenant: str, root: Path, log: JobLog,
                      inherited: dict[str, str], hold: Callable[[Path], None] = lambda _: None) -> PreparedOverlay:
        started = time.monotonic()
        text = (project / REQUIREMENTS).read_text(errors="replace")
        image = placement["image"]
        image_id = str((await asyncio.to_thread(self.client.images.get, image)).id)
        local = await asyncio.to_thread(digest_dirs, local_find_links(text, project))
        key = image_overlay_key(tenant, text, image_id, local)
        entry = root / "overlays" / key
        for folder, mode in ((root, 0o755), (root / "overlays", 0o755), (root / "locks", 0o700)):
            folder.mkdir(mode=mode, parents=True, exist_ok=True)
        await asyncio.to_thread(hold, entry)  # in use from before the look (nodeagent.cachecap)
        if (entry / OVERLAY_MANIFEST).is_file():
            log.info(f"requirements.txt: installed for this image on this node already (overlay {key[:12]}), reused")
            return PreparedOverlay(entry, True, time.monotonic() - started, user_base=True)
        async with node_lock(root / "locks" / f"overlay-{key}.lock", log,
                             "Waiting: another job on this node is installing the same requirements.txt"):
            if (entry / OVERLAY_MANIFEST).is_file():
                log.info("requirements.txt: installed by another job on this node meanwhile, reused")
                return PreparedOverlay(entry, True, time.monotonic() - started, user_base=True)
            log.info(f"requirements.txt: installing it in a container of {image} as a user of the job's tenant "
                     "(once per node and image; later jobs reuse it)")
            try:
                await self._build(entry, root, project, placement, log, inherited)
            except BaseException:
                await asyncio.to_thread(shutil.rmtree, entry, True)
                raise
            seconds = time.monotonic() - started
            log.info(f"requirements.txt installed ({seconds:.1f} s; cached for later jobs)")
            return PreparedOverlay(entry, False, seconds, user_base=True)

    async def _build(self, entry: Path, root: Path, project: Path, placement: Placement, log: JobLog,
                     inherited: dict[str, str]) -> None:
        await asyncio.to_thread(shutil.rmtree, entry, True)
        entry.mkdir(mode=0o755)
        await asyncio.to_thread(shutil.copytree, project, entry / SOURCE, symlinks=True)
        pip_dir = await asyncio.to_thread(lent_pip, root)
        user = await asyncio.to_thread(self.allocate, placement, "/requirements")
        container: Any = None
        try:
            await asyncio.to_thread(_give, entry, user)
            container = await asyncio.to_thread(self._start, entry, pip_dir, placement, user, inherited)
            code, lines = await asyncio.to_thread(self._wait, container)
        finally:
            # also when the job is stopped meanwhile: the build's user is free only once its container is gone
            await asyncio.to_thread(_remove, self.client, container, f"{container_name(placement)}-requirements")
            await asyncio.to_thread(hand_back, entry, entry, user.uid)
            user.release()
        for line in lines:
            if line.lstrip().startswith(("Collecting", "Installing", "Successfully", "Requirement already", "the image")):
                log.info(f"  {line.strip()}")
        if code != 0:
            raise RequirementsFailed(f"requirements.txt could not be installed (pip exit code {code}): {pip_error(lines)}")
        for leftover in (SOURCE, ".cache"):
            await asyncio.to_thread(shutil.rmtree, entry / leftover, True)
        await asyncio.to_thread(secure_tree, entry)  # the agent's, read-only to jobs: before the manifest
        (entry / OVERLAY_MANIFEST).write_text(json.dumps({"image": placement["image"], "prepared_at": time.time()}))

    def _start(self, entry: Path, pip_dir: Path, placement: Placement, user: JobIdentity, inherited: dict[str, str]) -> Any:
        from docker.types import Mount

        env = {name: value for name, value in inherited.items() if name in PIP_NAMES}
        env.update(HOME="/tmp", TMPDIR="/tmp", LANG="C.UTF-8", USER=user.name, LOGNAME=user.name,
                   PYTHONUSERBASE=str(REQUIREMENTS_IN_CONTAINER), PIP_NO_CACHE_DIR="1", PIP_PROGRESS_BAR="off",
                   PIP_BREAK_SYSTEM_PACKAGES="1",  # a Debian image's Python refuses --user installs without it
                   PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
        name = f"{container_name(placement)}-requirements"
        with contextlib.suppress(Exception):  # a crashed agent's build of the same name
            self.client.containers.get(name).remove(force=True)
        return self.client.containers.run(
            image=placement["image"], command=["bash", "-c", BUILD_SCRIPT], name=name, environment=env,
            working_dir="/tmp", user=f"{user.uid}:{user.gid}",
            mounts=[Mount(str(REQUIREMENTS_IN_CONTAINER), str(entry), type="bind", read_only=False),
                    Mount(str(PIP_IN_CONTAINER), str(pip_dir), type="bind", read_only=True)],
            security_opt=["no-new-privileges"], cap_drop=["ALL"], privileged=False, network_mode="host", init=True,
            labels={**container_labels(placement, self.node_name), "simpleai.build": "requirements"}, detach=True)

    def _wait(self, container: Any) -> tuple[int, list[str]]:
        result = self.wait_api.wait(container.id)  # no read timeout: an install may take minutes
        output = self.wait_api.logs(container.id, stdout=True, stderr=True).decode(errors="replace")
        return int(result.get("StatusCode", -1)), list(deque(output.splitlines(), maxlen=TAIL_LINES * 4))


def _remove(client: Any, container: Any, name: str) -> None:
    with contextlib.suppress(Exception):  # already gone (or never made)
        (container or client.containers.get(name)).remove(force=True)


def _give(entry: Path, user: JobIdentity) -> None:
    """The entry to the build's user while pip writes it (nodeagent.nodecache.secure_tree takes it back)."""
    import os

    for directory, dirs, files in os.walk(entry):
        os.lchown(directory, user.uid, user.gid)
        for name in [*dirs, *files]:
            os.lchown(os.path.join(directory, name), user.uid, user.gid)
