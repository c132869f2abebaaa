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

PROGRAMS = ("munged", "slurmctld", "slurmd", "slurmrestd", "scontrol")
PACKAGES = "slurmctld slurmd slurm-client slurmrestd munge slurm-wlm-jwt-plugin"
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
    cpus_per_node: int = 8
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
            self._spawn("slurmctld", [_program("slurmctld"), "-D", "-i", "-f", str(self.conf)])
            wait_for_port(self.ctld_port, timeout=30)
            for name in self.nodes:
                self._spawn(f"slurmd-{name}", [_program("slurmd"), "-D", "-f", str(self.conf), "-N", name])
            self._spawn("slurmrestd", [
                _program("slurmrestd"), "-f", str(self.conf), "-u", REST_USER, "-g", _group_of(REST_USER),
                "-a", "rest_auth/jwt", "-s", "openapi/v0.0.38,openapi/v0.0.37,openapi/v0.0.36", f"127.0.0.1:{self.rest_port}",
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
        (self.root / "gres.conf").write_text(f"Name=gpu File={devices}/fakegpu[0-{last}]\n")
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
        "gpu_metrics": "simulated", "metrics_interval_seconds": 1, **fields,
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


def slurm_conf(cluster: LocalSlurm) -> str:
    root = cluster.root
    node_lines = "\n".join(
        f"NodeName={name} NodeAddr=127.0.0.1 Port={port} CPUs={cluster.cpus_per_node} Sockets=1 "
        f"CoresPerSocket={cluster.cpus_per_node} ThreadsPerCore=1 RealMemory=1000 Gres=gpu:{cluster.gpus_per_node} State=UNKNOWN"
        for name, port in cluster.node_ports.items()
    )
    nodes = ",".join(cluster.nodes)
    return f"""# written by jobs.slurm.tests.cluster for one test session
ClusterName=simpleai
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={cluster.ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.sock,cred_expire={cluster.cred_expire}
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={root}/jwt.key
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmdParameters=config_overrides
MpiDefault=none
SchedulerType=sched/backfill
# look at pending jobs every second or two (defaults: 60 s, backfill 30 s): a requeued job is
# started again as soon as its requeue delay (cred_expire) has passed
SchedulerParameters=sched_interval=2,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobRequeue=1
JobCompType=jobcomp/filetxt
JobCompLoc={cluster.jobcomp}
SlurmdTimeout={cluster.slurmd_timeout}
MessageTimeout=5
KillWait={cluster.kill_wait}
ReturnToService=2
MailProg=/bin/true
{node_lines}
PartitionName=ondemand Nodes={nodes} Default=YES PriorityTier=10 PreemptMode=OFF MaxTime=INFINITE State=UP
PartitionName=spot Nodes={nodes} PriorityTier=1 PreemptMode=REQUEUE GraceTime=0 MaxTime=INFINITE State=UP
"""
