"""The tests' base container image and the packages the container tests need: a Debian `minbase`
root file system with python3 (debootstrap), marked `VARIANT_ID=simpleai-minbase`, cached as
`$SIMPLEAI_CACHE_DIR/<recipe>/rootfs.tar` (jobs.tests.e2e.containers serves it from a registry).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CACHE_DIR = Path(os.environ.get("SIMPLEAI_CACHE_DIR", "/var/cache/simpleai"))
RECIPE = "minbase-bookworm-python3-v1"  # change it when the image below changes: a new cache entry
SUITE = "bookworm"
MIRROR = os.environ.get("DEBOOTSTRAP_MIRROR", "http://deb.debian.org/debian")
IMAGE_PATH = "team/minbase"
IMAGE_TAG = "1"
IMAGE_MARKER = "VARIANT_ID=simpleai-minbase"
USERNAME = "trainer"
# every binary the setup needs → the package that brings it
PACKAGES = {
    "/usr/bin/podman": "podman",
    "/usr/sbin/runc": "runc",
    "/usr/libexec/podman/catatonit": "catatonit",
    "/usr/bin/docker-registry": "docker-registry",
    "/usr/sbin/debootstrap": "debootstrap",
    "/usr/bin/htpasswd": "apache2-utils",
}


class SetupError(RuntimeError):
    """The container setup cannot be done on this machine (the message says why)."""


def run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, **kwargs)
    if result.returncode:
        raise SetupError(f"{' '.join(args[:4])} failed ({result.returncode}): {(result.stderr or result.stdout)[-2000:]}")
    return result


def ensure_packages() -> float:
    """Install what is missing with apt; returns the seconds spent (0 when nothing was)."""
    missing = sorted({package for path, package in PACKAGES.items() if not Path(path).exists()})
    if not missing:
        return 0.0
    if os.geteuid() != 0:
        raise SetupError(f"the container tests need {', '.join(missing)}; run them as root (apt-get install) or install them")
    started = time.monotonic()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    lock = ["-o", "DPkg::Lock::Timeout=300"]  # another apt run (a second session) finishes first
    run(["apt-get", *lock, "update", "-qq"], env=env)
    run(["apt-get", *lock, "install", "-y", "-qq", "--no-install-recommends", *missing], env=env)
    return time.monotonic() - started


@contextlib.contextmanager
def cache_lock():
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # two sessions never build the same entry at once
        yield


def ensure_rootfs() -> tuple[Path, float]:
    """The base image's root file system as a tar (debootstrap on the first run); returns (path, seconds)."""
    entry = CACHE_DIR / RECIPE
    tar = entry / "rootfs.tar"
    if tar.exists():
        return tar, 0.0
    started = time.monotonic()
    with cache_lock():
        if tar.exists():
            return tar, 0.0
        entry.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=entry, prefix="build-") as build:
            rootfs = Path(build) / "rootfs"
            run(["debootstrap", "--variant=minbase", "--include=python3,python-is-python3", SUITE, str(rootfs), MIRROR])
            for junk in ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/locale", "usr/share/man"):
                shutil.rmtree(rootfs / junk, ignore_errors=True)
            # /etc/os-release is a link to /usr/lib/os-release: write the real file
            os_release = rootfs / "usr/lib/os-release"
            os_release.write_text(os_release.read_text() + f'VARIANT="Simple AI Training test image"\n{IMAGE_MARKER}\n')
            partial = Path(build) / "rootfs.tar"
            run(["tar", "-C", str(rootfs), "-cf", str(partial), "."])
            os.replace(partial, tar)  # atomic: a half-written tar is never taken for the cache
    return tar, time.monotonic() - started


def link_or_copy(source: str, target: str) -> str:
    try:
        os.link(source, target)
    except OSError:  # another file system
        shutil.copy2(source, target)
    return target
