"""A real Slurm 22.05 cluster on this machine, for the tests and the benchmark (Debian packages).

One controller, two `slurmd -N` nodes on loopback ports with fake GPU device files as gres, and
slurmrestd as an unprivileged user with JWT, all under a private temporary directory and on free
ports, so parallel runs never meet. Every process is started here and stopped by its PID; job
steps outlive their daemons, so `stop()` kills what still runs with this cluster's SLURM_CONF.

Needs root (slurmd runs jobs as other users) and the packages `.ci/run` installs:
slurmctld slurmd slurm-client slurmrestd munge slurm-wlm-jwt-plugin.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from console.services.ports import free_port, wait_for_port
from jobs.slurm import jwt
from jobs.slurm.client import SlurmClient, SlurmError

from .slurm_conf import slurm_conf

PROGRAMS = ("munged", "slurmctld", "slurmd", "slurmrestd", "scontrol")
PACKAGES = "slurmctld slurmd slurm-client slurmrestd munge slurm-wlm-jwt-plugin"
# accounting (slurmdbd on a MariaDB/MySQL server): on when both are here, e.g. MYSQL=127.0.0.1:3306
ACCOUNTING_PACKAGES = "slurmdbd mariadb-client"
MYSQL = os.environ.get("SLURM_TEST_MYSQL", "127.0.0.1:3306")  # root without a password


def accounting_missing() -> str:
    """Why slurmdbd cannot run here ("" when it can)."""
    import socket

    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    missing = [name for name in ("slurmdbd", "sacctmgr", "sacct", "mysql") if shutil.which(name, path=search) is None]
    if missing:
        return f"{', '.join(missing)} missing (apt-get install {ACCOUNTING_PACKAGES})"
    host, _, port = MYSQL.partition(":")
    try:
        socket.create_connection((host, int(port or 3306)), timeout=2).close()
    except OSError as exc:
        return f"no MariaDB/MySQL at {MYSQL} ({exc})"
    return ""
REST_USER = "nobody"  # slurmrestd refuses to run as root
API_VERSION = "v0.0.38"


class SlurmUnavailable(Exception):
    """Slurm cannot run here (packages missing, not root): outside CI the tests skip."""


def missing_programs() -> list[str]:
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [name for name in PROGRAMS if shutil.which(name, path=search) is None]


def _program(name: str) -> str:
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])) or name


@dataclass
class LocalSlurm:
    nodes: tuple[str, ...] = ("n1", "n2")
    gpus_per_node: int = 8
    # shaped like a g3 node (128 vCPUs, 4096 GB) so jobs ask for what they would on a real one;
    # slurmd takes the configured figures (SlurmdParameters=config_overrides), nothing is enforced
    cpus_per_node: int = 128
    memory_mb: int = 4096 * 1024
    gpu_type: str = "b300"  # gres.conf Type=: jobs may ask for gpu:b300:N or plain gpu:N
    features: str = "ib"
    # slurmdbd with a private database: None turns it on when slurmdbd and MariaDB are here
    accounting: bool | None = None
    # the service user jobs run as: root here, because this checkout's interpreter lives under /root
    # (mode 0700) where no other user can run it; slurmrestd itself runs as `nobody`
    job_user: str = "root"
    slurmd_timeout: int = 5  # a stopped slurmd makes its node DOWN (NODE_FAIL) after about 20 s
    cred_expire: int = 5  # also the delay before Slurm starts a requeued job again (default 120 s, minimum 5)
    kill_wait: int = 5  # SIGTERM → KillWait → SIGKILL on cancel, preemption and time limit
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="simpleai-slurm-")))
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    jwt_key: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    def __post_init__(self) -> None:
        self.ctld_port, self.rest_port = free_port(), free_port()
        self.node_ports = {name: free_port() for name in self.nodes}
        self.conf = self.root / "slurm.conf"
        self.work_dir = self.root / "work"  # the launchers' node-local directory
        self.jobcomp = self.root / "jobcomp.txt"
        if self.accounting is None:
            self.accounting = not accounting_missing()
        self.dbd_port = free_port()
        self.database = f"slurm_acct_{self.root.name.replace('-', '_')}"

    # -- what the console needs ------------------------------------------------------------------
    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def token(self) -> str:
        return jwt.mint(self.jwt_key, self.job_user)

    def client(self, version: str = API_VERSION) -> SlurmClient:
        return SlurmClient(self.rest_url, version, self.job_user, self.token)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def sacctmgr(self, *args: str) -> str:
        return subprocess.run([_program("sacctmgr"), "-i", *args], env=self.env, capture_output=True, text=True, check=True).stdout

    def sacct(self, job_id: int) -> dict[str, str]:
        """Accounting's record of a job's allocation (`sacct -X`), by field."""
        fields = "JobID,User,Account,State,ElapsedRaw,AllocTRES,ExitCode"
        out = subprocess.run([_program("sacct"), "-X", "-n", "--parsable2", "-j", str(job_id), "-o", fields],
                             env=self.env, capture_output=True, text=True, check=True).stdout
        lines = [line for line in out.splitlines() if line.strip()]
        return dict(zip(fields.split(","), lines[-1].split("|"), strict=False)) if lines else {}

    def _mysql(self, statement: str) -> None:
        host, _, port = MYSQL.partition(":")
        subprocess.run([_program("mysql"), f"-h{host}", f"-P{port or 3306}", "-uroot", "-e", statement], capture_output=True)

    def _start_slurmdbd(self) -> None:
        """slurmdbd on its own database (it creates the tables), and this cluster registered in it."""
        host, _, port = MYSQL.partition(":")
        conf = self.root / "slurmdbd.conf"  # slurmdbd reads it beside slurm.conf; it must be 0600
        conf.write_text(f"""AuthType=auth/munge
AuthInfo=socket={self.root}/munge/munge.sock
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={self.root}/jwt.key
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={self.dbd_port}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost={host}
StoragePort={port or 3306}
StorageUser=root
StorageLoc={self.database}
LogFile={self.root}/log/slurmdbd.log
PidFile={self.root}/slurmdbd.pid
""")
        conf.chmod(0o600)
        self._spawn("slurmdbd", [_program("slurmdbd"), "-D"])
        wait_for_port(self.dbd_port, timeout=30)
        self.sacctmgr("add", "cluster", "simpleai")

    def scontrol(self, *args: str) -> str:
        return subprocess.run([_program("scontrol"), *args], env=self.env, capture_output=True, text=True, check=True).stdout

    # -- start / stop ----------------------------------------------------------------------------
    def start(self) -> LocalSlurm:
        if missing_programs():
            raise SlurmUnavailable(f"Slurm is not installed ({', '.join(missing_programs())} missing): "
                                   f"apt-get install {PACKAGES} (.ci/run does)")
        if os.geteuid() != 0:
            raise SlurmUnavailable("a local Slurm cluster needs root (slurmd runs jobs as their users)")
        self.root.chmod(0o755)  # munge and the unprivileged slurmrestd read below it
        try:
            self._write_files()
            self._start_munge()
            if self.accounting:
                self._start_slurmdbd()
            self._spawn("slurmctld", [_program("slurmctld"), "-D", "-i", "-f", str(self.conf)])
            wait_for_port(self.ctld_port, timeout=30)
            for name in self.nodes:
                self._spawn(f"slurmd-{name}", [_program("slurmd"), "-D", "-f", str(self.conf), "-N", name])
            self._spawn("slurmrestd", [
                _program("slurmrestd"), "-f", str(self.conf), "-u", REST_USER, "-g", _group_of(REST_USER),
                "-a", "rest_auth/jwt", "-s", "openapi/v0.0.38,openapi/v0.0.37,openapi/v0.0.36"
                + (",openapi/dbv0.0.38" if self.accounting else ""), f"127.0.0.1:{self.rest_port}",
            ], env={**self.env, "SLURM_JWT": "daemon"})
            wait_for_port(self.rest_port, timeout=30)
            self._wait_for_idle_nodes()
        except BaseException:
            self.stop()
            raise
        return self

    def _write_files(self) -> None:
        for directory in ("state", "log", "spool"):
            (self.root / directory).mkdir()
        self.work_dir.mkdir(mode=0o777)
        self.work_dir.chmod(0o777)  # jobs may run as an unprivileged service user
        devices = self.root / "dev"
        devices.mkdir()
        for index in range(self.gpus_per_node):
            os.mknod(devices / f"fakegpu{index}", 0o666 | 0o020000, os.makedev(1, 3))  # like /dev/null
        key = self.root / "jwt.key"
        key.write_bytes(self.jwt_key)
        key.chmod(0o600)
        last = self.gpus_per_node - 1
        (self.root / "gres.conf").write_text(f"Name=gpu Type={self.gpu_type} File={devices}/fakegpu[0-{last}]\n")
        self.conf.write_text(slurm_conf(self))

    def _start_munge(self) -> None:
        munge = self.root / "munge"
        munge.mkdir()
        (munge / "munge.key").write_bytes(secrets.token_bytes(1024))
        user = pwd.getpwnam("munge")
        for path in (munge, munge / "munge.key"):
            os.chown(path, user.pw_uid, user.pw_gid)
        (munge / "munge.key").chmod(0o400)
        munge.chmod(0o755)  # munged wants its socket directory searchable by everyone
        self._spawn("munged", [
            "setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
            _program("munged"), "--foreground", f"--socket={munge}/munge.sock", f"--key-file={munge}/munge.key",
            f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log", f"--seed-file={munge}/munged.seed",
        ])
        deadline = time.monotonic() + 15
        while not (munge / "munge.sock").exists():
            if time.monotonic() > deadline or self.processes["munged"].poll() is not None:
                raise SlurmUnavailable(f"munged did not start: {self.logs()}")
            time.sleep(0.05)

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        with open(self.root / "log" / f"{name}.out", "ab") as out:
            self.processes[name] = subprocess.Popen(args, env=env or self.env, stdout=out, stderr=subprocess.STDOUT,
                                                    start_new_session=True)

    def _wait_for_idle_nodes(self, timeout: float = 30) -> None:
        client = self.client()
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            exited = [name for name, process in self.processes.items() if process.poll() is not None]
            if exited:
                raise SlurmUnavailable(f"{', '.join(exited)} exited: {self.logs()}")
            with contextlib.suppress(SlurmError):
                states = client.node_states()
                if all(states.get(name, "").startswith("idle") and not states[name].endswith("*") for name in self.nodes):
                    return
            time.sleep(0.2)
        raise SlurmUnavailable(f"the nodes did not become idle ({states}): {self.logs()}")

    def stop(self) -> None:
        """Stop the daemons by PID, then kill every job step and task they left behind."""
        for name in reversed(list(self.processes)):
            process = self.processes[name]
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGCONT)  # a test may have stopped a slurmd
                    os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.reap()
        shutil.rmtree(self.root, ignore_errors=True)
        if self.accounting:
            self._mysql(f"DROP DATABASE IF EXISTS {self.database}")

    def clear(self, timeout: float = 30) -> None:
        """Cancel every job and wait until the nodes are idle again (between tests)."""
        client = self.client()
        for view in client.jobs():
            if view.state not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY"):
                client.cancel(view.job_id)
        for name in self.nodes:
            if _stopped(self.processes[f"slurmd-{name}"].pid):
                self.revive_node(name)
        self._wait_for_idle_nodes(timeout)

    # -- processes of this cluster's jobs --------------------------------------------------------
    def job_processes(self, **match: str) -> list[int]:
        """PIDs of processes of this cluster (slurmstepd, launchers, commands: they carry its
        SLURM_CONF), optionally only those whose environment has every `match` item."""
        wanted = {f"SLURM_CONF={self.conf}".encode(), *(f"{k}={v}".encode() for k, v in match.items())}
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                environ = set(Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"))
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if wanted <= environ and state != "Z" and int(entry) not in {p.pid for p in self.processes.values()}:
                found.append(int(entry))
        return found

    def reap(self) -> list[int]:
        pids = self.job_processes()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        return pids

    def freeze_node(self, name: str) -> None:
        """A node failure: its slurmd and everything of its job steps stop (SIGSTOP)."""
        os.killpg(self.processes[f"slurmd-{name}"].pid, signal.SIGSTOP)
        for pid in self.job_processes(SLURMD_NODENAME=name):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def revive_node(self, name: str) -> None:
        """The failed node comes back like a rebooted one: its old job processes are gone, slurmd runs again."""
        for pid in self.job_processes(SLURMD_NODENAME=name):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                os.kill(pid, signal.SIGCONT)
        os.killpg(self.processes[f"slurmd-{name}"].pid, signal.SIGCONT)

    def logs(self) -> str:
        parts = []
        for path in sorted((self.root / "log").glob("*")) + sorted(self.work_dir.glob("slurm-*.out")):
            with contextlib.suppress(OSError):
                parts.append(f"===== {path.name} =====\n{path.read_text(errors='replace')[-4000:]}")
        return "\n".join(parts)


def register(cluster: LocalSlurm, console_url: str, **fields):
    """The console's registration of `cluster` as the Slurm cluster serving g3 (8 GPUs per node)."""
    import sys

    from django.conf import settings

    from jobs.models import ServerType
    from jobs.slurm.models import SlurmCluster

    values = {
        "name": "local", "server_type": ServerType.objects.get(name="g3"), "rest_url": cluster.rest_url,
        "api_version": API_VERSION, "user_name": cluster.job_user, "on_demand_partition": "ondemand",
        "spot_partition": "spot", "gpus_per_node": cluster.gpus_per_node, "console_url": console_url,
        # the launcher runs from this checkout with this interpreter on both "nodes"
        "launcher": f"env PYTHONPATH={settings.BASE_DIR} {sys.executable} -m nodeagent.slurm_step",
        "work_dir": str(cluster.work_dir), "jobcomp_path": str(cluster.jobcomp), "stop_grace_seconds": 3,
        "gpu_metrics": "simulated", "metrics_interval_seconds": 1, "gpu_type": cluster.gpu_type,
        "accounting": bool(cluster.accounting), **fields,
    }
    row = SlurmCluster(**values)
    row.set_jwt_key(cluster.jwt_key)
    row.full_clean()
    row.save()
    return row


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def _group_of(user: str) -> str:
    import grp

    return grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name


def main() -> None:
    """`make slurm`: the same cluster the tests use, until Ctrl-C, with the command that registers it."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    django.setup()
    cluster = LocalSlurm().start()
    key = cluster.root / "jwt.key"
    print(f"""Slurm 22.05 is up: slurmctld, slurmd n1 and n2 (8 × b300 GRES, 128 CPUs, 4 TB each), slurmrestd at {cluster.rest_url}
accounting (slurmdbd): {"on" if cluster.accounting else "off (" + accounting_missing() + ")"}
  export SLURM_CONF={cluster.conf}    # then sinfo, squeue, scontrol, sacct work against it
Register it with the console (make run in another terminal; jobs of server type g3 then go to it):
  .venv/bin/python manage.py slurm_cluster add local --server-type g3 --rest-url {cluster.rest_url} --user root \\
      --jwt-key-file {key} --on-demand-partition ondemand --spot-partition spot --gpus-per-node 8 --gpu-type b300 \\
      --console-url http://127.0.0.1:8000 --jobcomp-path {cluster.jobcomp}{" --accounting" if cluster.accounting else ""} \\
      --launcher "env PYTHONPATH={os.getcwd()} {os.path.abspath(".venv/bin/python")} -m nodeagent.slurm_step" --work-dir {cluster.work_dir}
Ctrl-C stops it and removes {cluster.root}.""", flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
