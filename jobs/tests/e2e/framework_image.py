"""The BYOC test image with the DeepSpeed training environment's set (the Docker runtime's side
of "each framework version is a training environment").

The test base image (containers.py: Debian minbase with python3) plus, in
/usr/local/lib/python3.11/dist-packages, exactly the pinned list of the seeded `deepspeed-0.18.9`
environment (torch 2.13.0 from local disk, transformers, datasets, safetensors, accelerate, numpy,
boto3, deepspeed 0.18.9), installed on the host with pip --target (the image's Python is also
3.11). DeepSpeed's shared-memory op for CPU collectives is compiled here (DS_BUILD_SHM_COMM=1),
since the image has no compiler for DeepSpeed to build it at run time. The programs (deepspeed,
accelerate, torchrun) go to /usr/local/bin with the image's python3 in their first line.

Cached as `$SIMPLEAI_CACHE_DIR/<FRAMEWORKS_RECIPE>/image.tar` (about 3 minutes to build, 1.5 GB);
containers.py pushes it to the test registry as `team/frameworks:0.18.9` once per cache.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

FRAMEWORKS_RECIPE = "frameworks-deepspeed-0.18.9-torch-2.13.0-v2"  # change it when the image changes
FRAMEWORKS_IMAGE_PATH = "team/frameworks"
FRAMEWORKS_IMAGE_TAG = "0.18.9"


def _requirements() -> list[str]:
    from .environments import seeded_specs

    return next(spec["requirements"] for spec in seeded_specs() if spec["framework"] == "deepspeed")


def _fix_scripts(bin_dir: Path) -> None:
    """pip wrote the host's interpreter into each script's first line; the image has /usr/bin/python3."""
    for script in bin_dir.iterdir():
        if not script.is_file():
            continue
        data = script.read_bytes()
        if data.startswith(b"#!") and b"python" in data.split(b"\n", 1)[0]:
            script.write_bytes(b"#!/usr/bin/python3\n" + data.split(b"\n", 1)[1])
            script.chmod(0o755)


def ensure_frameworks_tar(cache_dir: Path, base_tar: Path, run) -> tuple[Path, float]:
    """The image's root file system as a tar: the base image plus the environment's packages."""
    entry = cache_dir / FRAMEWORKS_RECIPE
    tar = entry / "image.tar"
    if tar.exists():
        return tar, 0.0
    started = time.monotonic()
    entry.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=entry, prefix="build-") as build:
        root = Path(build) / "root"
        root.mkdir()
        run(["tar", "-xf", str(base_tar), "-C", str(root)])  # one tree, one tar: no path twice in the layer
        site = root / "usr/local/lib/python3.11/dist-packages"
        requirements = Path(build) / "requirements.txt"
        requirements.write_text("\n".join(_requirements()) + "\n")
        env = {**os.environ, "DS_BUILD_OPS": "0", "DS_BUILD_SHM_COMM": "1", "DS_ACCELERATOR": "cpu", "PIP_PROGRESS_BAR": "off"}
        # --no-build-isolation: deepspeed builds against this interpreter's torch 2.13.0, not a download;
        # --no-cache-dir: a deepspeed wheel cached from a build without the op must not be reused
        run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-build-isolation", "--no-cache-dir",
             "--target", str(site), "-r", str(requirements)], env=env)
        programs = root / "usr/local/bin"
        programs.mkdir(parents=True, exist_ok=True)
        for script in (site / "bin").iterdir():
            shutil.move(str(script), str(programs / script.name))
        (site / "bin").rmdir()
        _fix_scripts(programs)
        installed = (site / "deepspeed" / "git_version_info_installed.py").read_text()
        if "'deepspeed_shm_comm': False" in installed or "deepspeed_shm_comm" not in installed:
            raise RuntimeError(f"DeepSpeed's shared-memory op was not built into the image: {installed}")
        partial = Path(build) / "image.tar"
        run(["tar", "-C", str(root), "-cf", str(partial), "."])
        os.replace(partial, tar)  # atomic: a half-written tar is never taken for the cache
    return tar, time.monotonic() - started


def push_frameworks_image(tar: Path, registry: str, username: str, password: str, env: dict[str, str], run) -> None:
    local = f"localhost/simpleai-frameworks:{FRAMEWORKS_RECIPE}"
    run(["podman", "import", str(tar), local], env=env)
    run(["podman", "push", "--tls-verify=false", "--creds", f"{username}:{password}", local,
         f"{registry}/{FRAMEWORKS_IMAGE_PATH}:{FRAMEWORKS_IMAGE_TAG}"], env=env)
    run(["podman", "rmi", local], env=env)
