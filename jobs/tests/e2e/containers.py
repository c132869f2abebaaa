"""Real containers for the tests: Podman serving the Docker Engine API, and a private registry.

What the Docker runtime is tested against (see /work/shared/reference/containers.md):

- packages (apt, as root; skipped when present): podman, runc, catatonit (the container init),
  docker-registry (the CNCF distribution registry), debootstrap, apache2-utils (htpasswd);
- a small base image: a Debian `minbase` root file system with python3, built by debootstrap,
  with `VARIANT_ID=simpleai-minbase` added to its /etc/os-release so a test can tell the
  image's file from the host's; cached as `$SIMPLEAI_CACHE_DIR/<recipe>/rootfs.tar`;
- the registry's storage holding that image as `team/minbase:1`, cached beside it.

Per test session nothing outside a temporary directory is configured and no systemd is
needed: `podman system service` runs as a background process on a socket there, with its own
configuration files (runc, rlimits this machine allows, the registry marked insecure) and
its own image store (so the first job really pulls); the registry runs on a free loopback
port with a fresh random password. Both are stopped, and every container removed, at the end.

`python -m jobs.tests.e2e.containers` installs and builds the cache alone and says how long
each step took (`.ci/run` calls it before the suite, so the suite's time excludes it).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ..machine import unavailable
from . import framework_image
from .base_image import (
    CACHE_DIR,
    IMAGE_PATH,
    IMAGE_TAG,
    RECIPE,
    USERNAME,
    SetupError,
    cache_lock,
    ensure_packages,
    ensure_rootfs,
    link_or_copy,
    run,
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise SetupError(f"timed out after {timeout:.0f} s waiting for {what}")


def _port_answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class ContainerHost:
    """Podman's Docker API and a password-protected registry holding the test image."""

    root: Path
    registry_port: int
    password: str = field(default_factory=lambda: f"Reg-{secrets.token_urlsafe(12)}")
    username: str = USERNAME
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def socket(self) -> Path:
        return self.root / "podman.sock"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def registry(self) -> str:
        return f"127.0.0.1:{self.registry_port}"

    @property
    def image(self) -> str:
        return f"{self.registry}/{IMAGE_PATH}:{IMAGE_TAG}"

    @property
    def frameworks_image(self) -> str:
        """The base image with the DeepSpeed environment's set (framework_image.py)."""
        return f"{self.registry}/{framework_image.FRAMEWORKS_IMAGE_PATH}:{framework_image.FRAMEWORKS_IMAGE_TAG}"

    def podman_env(self) -> dict[str, str]:
        conf = self.root / "conf"
        return {
            **os.environ,
            "CONTAINERS_CONF": str(conf / "containers.conf"),
            "CONTAINERS_REGISTRIES_CONF": str(conf / "registries.conf"),
            "CONTAINERS_STORAGE_CONF": str(conf / "storage.conf"),
        }

    def agent_env(self) -> dict[str, str]:
        return {"DOCKER_HOST": self.docker_host}

    def client(self):
        import docker

        return docker.DockerClient(base_url=self.docker_host, timeout=120)

    def job_fields(self, **overrides: str) -> dict[str, str]:
        """The job's AI Training Image: the test image with the right credentials (unless overridden)."""
        return {"image_url": self.image, "registry_username": self.username, "registry_password": self.password, **overrides}

    def containers(self, **labels: str) -> list[str]:
        """Names of the containers (running or not) whose `simpleai.*` labels match."""
        filters = {"label": [f"simpleai.{key.replace('_', '-')}={value}" for key, value in labels.items()]}
        with contextlib.closing(self.client()) as client:
            return [container.name for container in client.containers.list(all=True, filters=filters, ignore_removed=True)]

    def top(self, **labels: str) -> str:
        """What runs inside each matching container (`podman top`): tells a hung command from a
        lost exit when a job does not end."""
        env = self.podman_env()
        return "\n".join(
            f"== {name}\n" + subprocess.run(["podman", "top", name], capture_output=True, text=True, env=env, timeout=30).stdout
            for name in self.containers(**labels)
        )

    def logs(self) -> str:
        return "\n".join(
            f"===== {path.name} =====\n{path.read_text(errors='replace')[-4000:]}" for path in sorted(self.root.glob("*.log"))
        )

    # -- start and stop -----------------------------------------------------------------

    def _write_configuration(self) -> None:
        conf = self.root / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        # cgroups in hybrid mode here: crun refuses them, runc works; podman's default
        # rlimits are above this machine's hard limits. Locks and state live in this session's
        # directory: the default shared-memory locks are one set per machine, and a fresh
        # Podman frees them all at its start, under the feet of another session's Podman.
        (conf / "containers.conf").write_text(f"""\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{self.root}/events.log"
tmp_dir = "{self.root}/libpod-tmp"
lock_type = "file"
""")
        (conf / "registries.conf").write_text(f"""\
unqualified-search-registries = []
[[registry]]
location = "{self.registry}"
insecure = true
""")
        (conf / "storage.conf").write_text(f"""\
[storage]
driver = "overlay"
graphroot = "{self.root}/storage"
runroot = "{self.root}/run"
""")

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> None:
        with open(self.root / f"{name}.log", "ab") as log:
            self.processes[name] = subprocess.Popen(
                args, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )

    def _start_registry(self, data: Path) -> None:
        reg = self.root / "registry"
        reg.mkdir(exist_ok=True)
        run(["htpasswd", "-Bbc", str(reg / "htpasswd"), self.username, self.password])
        (reg / "config.yml").write_text(f"""\
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {data}
http:
  addr: {self.registry}
  secret: {secrets.token_hex(16)}
auth:
  htpasswd:
    realm: simpleai-tests
    path: {reg / "htpasswd"}
""")
        self._spawn("registry", ["docker-registry", "serve", str(reg / "config.yml")], dict(os.environ))
        _wait(lambda: _port_answers(self.registry_port) or self.processes["registry"].poll() is not None, 30, "the registry")
        if self.processes["registry"].poll() is not None:
            raise SetupError(f"the registry exited:\n{self.logs()}")

    def _start_podman(self) -> None:
        self._spawn("podman", ["podman", "system", "service", "--time=0", self.docker_host], self.podman_env())

        def answers() -> bool:
            if self.processes["podman"].poll() is not None:
                raise SetupError(f"podman system service exited:\n{self.logs()}")
            if not self.socket.exists():
                return False
            try:
                with contextlib.closing(self.client()) as client:
                    return bool(client.ping())
            except Exception:
                return False

        _wait(answers, 60, "Podman's Docker API")

    def _push_test_image(self, rootfs_tar: Path) -> None:
        env = self.podman_env()
        local = f"localhost/simpleai-minbase:{RECIPE}"
        run(["podman", "import", str(rootfs_tar), local], env=env)
        run(["podman", "push", "--tls-verify=false", "--creds", f"{self.username}:{self.password}", local, self.image], env=env)
        # the first job of the session must really pull it
        run(["podman", "rmi", local], env=env)

    def start(self) -> ContainerHost:
        started = time.monotonic()
        self.timings["packages"] = ensure_packages()
        rootfs_tar, self.timings["debootstrap"] = ensure_rootfs()
        frameworks_tar, self.timings["frameworks"] = framework_image.ensure_frameworks_tar(CACHE_DIR, rootfs_tar, run)
        started_here = time.monotonic()
        self._write_configuration()
        cached = CACHE_DIR / RECIPE / f"registry-{framework_image.FRAMEWORKS_RECIPE}"
        data = self.root / "registry-data"
        if cached.is_dir():
            # hard links: the registry never rewrites a blob, and the framework image is large
            shutil.copytree(cached, data, copy_function=link_or_copy)
        self._start_registry(data)
        self._start_podman()
        if not cached.is_dir():
            pushed = time.monotonic()
            self._push_test_image(rootfs_tar)
            framework_image.push_frameworks_image(frameworks_tar, self.registry, self.username, self.password,
                                                  self.podman_env(), run)
            with cache_lock():
                if not cached.is_dir():
                    partial = cached.with_name(f"registry-{os.getpid()}")
                    shutil.copytree(data, partial)
                    os.replace(partial, cached)
            self.timings["push"] = time.monotonic() - pushed
        self.timings["session"] = time.monotonic() - started_here
        self.timings["total"] = time.monotonic() - started
        return self

    def stop(self) -> None:
        with contextlib.suppress(Exception), contextlib.closing(self.client()) as client:
            for container in client.containers.list(all=True, ignore_removed=True):
                with contextlib.suppress(Exception):
                    container.remove(force=True)
        for process in reversed(list(self.processes.values())):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        # podman makes its overlay directory a private bind mount of itself: undo it, or the
        # temporary directory could not be removed
        for mount_point in reversed(_mounts_under(self.root)):
            subprocess.run(["umount", "-l", mount_point], capture_output=True)


def _mounts_under(root: Path) -> list[str]:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    points = [line.split()[4] for line in lines if len(line.split()) > 4]
    return [point for point in points if point == str(root) or point.startswith(f"{root}/")]


def start_container_host(root: Path) -> ContainerHost:
    host = ContainerHost(root=root, registry_port=free_port())
    try:
        return host.start()
    except BaseException:
        host.stop()
        raise


@pytest.fixture(scope="session")
def container_host(tmp_path_factory):
    """Podman's Docker Engine API + a private registry (user `trainer`, a random password)
    holding `team/minbase:1`; installs and builds what is missing on first use."""
    if os.geteuid() != 0:  # CI runs as root; so must a developer who wants these tests
        unavailable("real containers need root here (rootful Podman, and apt to install it)")
    # a short path: the socket's must fit in 108 bytes
    host = start_container_host(Path(tempfile.mkdtemp(prefix="simpleai-ctr-")))
    print(f"\ncontainer host ready: {host.timings}", file=sys.stderr)
    yield host
    host.stop()
    shutil.rmtree(host.root, ignore_errors=True)


@dataclass(frozen=True)
class RuntimeUnderTest:
    """How the node agents of a test run commands, and what a job needs for that runtime.

    Docker agents get a File Storage root (`--file-storage-root`, shared by the agents of the
    test as a network file system would be by nodes) unless `file_storage_root` is None."""

    name: str
    host: ContainerHost | None = None
    file_storage_root: Path | None = None
    without_file_storage: bool = False  # the agents get no --file-storage-root at all

    @property
    def agent_args(self) -> tuple[str, ...]:
        if not self.host:
            return ()
        storage = ("--file-storage-root", str(self.file_storage_root)) if self.file_storage_root else ()
        return ("--runtime", self.name, *storage)

    def share(self, owner) -> Path:
        """The File Storage share of `owner` (a console user) on the test's nodes, made as an
        agent makes it, for a test to put files in before a job mounts it."""
        from nodeagent.fileshare import tenant_share
        from nodeagent.jobusers import IdentityPool

        assert self.file_storage_root is not None, "this runtime's agents have no File Storage"
        return tenant_share(self.file_storage_root, owner.pk, IdentityPool().tenant_gid(owner.pk))

    @property
    def agent_env(self) -> dict[str, str]:
        return self.host.agent_env() if self.host else {}

    def job_fields(self, **overrides: str) -> dict[str, str]:
        """Image fields of a job (none for the process runtime: it ignores the image)."""
        return self.host.job_fields(**overrides) if self.host else dict(overrides)

    def containers(self, job_id: int) -> list[str]:
        """The job's containers still on the engine (none for the process runtime)."""
        return self.host.containers(job=str(job_id)) if self.host else []

    def processes(self, job_id: int) -> str:
        """What runs inside the job's containers (nothing for the process runtime)."""
        return self.host.top(job=str(job_id)) if self.host else ""


@pytest.fixture
def runtime(request) -> RuntimeUnderTest:
    """The agents' runtime: `process`, or `docker` for a test parametrized with
    `@pytest.mark.parametrize("runtime", ["process", "docker"], indirect=True)`."""
    name = getattr(request, "param", "process")
    if name == "docker":
        root = request.getfixturevalue("tmp_path") / "file-storage"
        return RuntimeUnderTest("docker", request.getfixturevalue("container_host"), file_storage_root=root)
    return RuntimeUnderTest("process")


def main() -> int:
    """Install and build the cache now (CI runs it before the suite); prints the seconds spent."""
    started = time.monotonic()
    packages = ensure_packages()
    _, debootstrap = ensure_rootfs()
    root = Path(tempfile.mkdtemp(prefix="simpleai-ctr-"))
    try:
        host = start_container_host(root)
        host.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"container test setup ready in {time.monotonic() - started:.1f} s "
          f"(apt {packages:.1f} s, debootstrap {debootstrap:.1f} s, framework image {host.timings.get('frameworks', 0):.1f} s, "
          f"image push {host.timings.get('push', 0):.1f} s; "
          f"cache {CACHE_DIR / RECIPE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
