"""A job's container against the node and against other tenants, on a real engine.

A real agent (the supervisor, the runner, the Docker runtime) runs placements in real
containers (Podman's Docker API and the private registry of `containers.py`); the console is
the agent tests' fake one (nodeagent.tests.agent_support), so each placement names its tenant
as the console does. The command in each container is a probe that prints what it finds.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import pytest

from nodeagent.agent import Agent
from nodeagent.connection import Backoff
from nodeagent.gpus import SimulatedBackend
from nodeagent.jobusers import IdentityPool
from nodeagent.runtimes.docker import DockerRuntime
from nodeagent.tests.agent_support import FakeConsole, make_config, make_placement, running_console, until

pytestmark = pytest.mark.slow

ALICE, BOB = {"id": 7001, "name": "alice"}, {"id": 7002, "name": "bob"}
JOB_SECONDS = 90  # a start and a probe take a few seconds; the first pull some more

# Prints one JSON object: who the process is, what it may do, what it sees of the node.
PROBE = r"""
import json, os, socket, sys
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
mounts = []
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    mounts.append({"point": fields[4], "options": fields[5].split(",")})
def can(action):
    try:
        action()
        return True
    except OSError:
        return False
work_dir = sys.argv[1]
result = {
    "uid": os.getuid(), "gid": os.getgid(), "euid": os.geteuid(), "groups": os.getgroups(),
    "caps": {key: status[key].strip() for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")},
    "no_new_privs": status["NoNewPrivs"].strip(),
    "env": {key: os.environ.get(key) for key in ("HOME", "USER", "LOGNAME", "OUTPUT_DIR", "CHECKPOINT_VENDOR", "PWD")},
    "environ": dict(os.environ),
    "cwd": os.getcwd(),
    "home_writable": can(lambda: open(os.path.join(os.environ["HOME"], "probe"), "w").close()),
    "output_writable": can(lambda: open(os.path.join(os.environ["OUTPUT_DIR"], "probe"), "w").close()),
    "vendor_writable": can(lambda: open(os.path.join(os.environ["CHECKPOINT_VENDOR"], "probe"), "w").close()),
    "setuid_root": can(lambda: os.setuid(0)),
    "chown": can(lambda: os.chown(os.environ["HOME"], 0, 0)),
    "sees_work_dir": os.path.exists(work_dir),
    "sees_spool": os.path.exists(os.path.join(work_dir, "spool")),
    # the agent runs in the test's process (`python -m pytest`): none of the node's processes is here
    "processes": [open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\0")
                  for pid in os.listdir("/proc") if pid.isdigit() and os.path.exists(f"/proc/{pid}/cmdline")],
    "mounts": mounts,
}
print("PROBE " + json.dumps(result))
"""


def probe_command(work_dir: Path, then: str = "") -> str:
    return f"python3 - {work_dir} <<'PROBE_EOF'\n{PROBE}\nPROBE_EOF\n{then}"


def job(host, job_id: int, command: str, tenant: dict | None = ALICE, **overrides):
    fields = dict(job_id=job_id, job_name=f"iso-{job_id}", command=command, image=host.image, gpu_indices=[0],
                  registry={"username": host.username, "password": host.password}, stop_grace_seconds=2.0)
    if tenant:
        fields["tenant"] = tenant
    return make_placement(**{**fields, **overrides})


class Run:
    """What the fake console heard from the agent, placement by placement."""

    def __init__(self, console: FakeConsole) -> None:
        self.console = console

    def lines(self, job_id: int) -> list[str]:
        by_seq = {line[0]: line[2] for batch in self.console.of_type("logs") if batch["job_id"] == job_id
                  for line in batch["lines"]}
        return [by_seq[seq] for seq in sorted(by_seq)]

    def exited(self, job_id: int) -> dict:
        return next(m for m in self.console.of_type("attempt") if m["job_id"] == job_id and m["state"] == "exited")

    def probe(self, job_id: int) -> dict:
        found = [line for line in self.lines(job_id) if line.startswith("PROBE ")]
        assert found, "\n".join(self.lines(job_id))
        return json.loads(found[-1][len("PROBE "):])


def run_agent(host, work_dir: Path, *waves, file_storage_root: Path | None = None) -> Run:
    """Run each wave of placements on one agent with the Docker runtime, a wave after the one
    before has exited; returns what the console heard."""
    console = FakeConsole(list(waves[0]))

    async def go():
        async with running_console(console) as port:
            config = make_config(work_dir, port, name="iso-node", runtime="docker", file_storage_root=file_storage_root,
                                 env_cache=work_dir / "environments")
            runtime = DockerRuntime(real_gpus=False, client=host.client(), node_name=config.name,
                                    identities=config.identities, file_storage_root=file_storage_root)
            agent = Agent(config, SimulatedBackend(config.name, 2, config.server_type), runtime)
            agent.connection.backoff = Backoff(initial=0.05, maximum=0.2)
            stop = asyncio.Event()
            task = asyncio.create_task(agent.run(stop))
            try:
                for number, wave in enumerate(waves):
                    if number:
                        await console.set_desired(list(wave))
                    ids = [p["job_id"] for p in wave]
                    await until(lambda ids=ids: all(_exited(console, job_id) for job_id in ids), timeout=JOB_SECONDS,
                                what=f"jobs {ids} to exit")
            finally:
                stop.set()
                await asyncio.wait_for(task, timeout=30)

    asyncio.run(go())
    return Run(console)


def _exited(console: FakeConsole, job_id: int) -> bool:
    return any(m["job_id"] == job_id and m["state"] == "exited" for m in console.of_type("attempt"))


@pytest.fixture
def file_storage(tmp_path) -> Path:
    """The operator's File Storage root on this node."""
    root = tmp_path / "file-storage"
    root.mkdir()
    return root


# -- the container and the node ---------------------------------------------------------------


def test_a_job_runs_as_a_user_of_its_own_without_privileges_and_sees_nothing_of_the_agent(container_host, tmp_path,
                                                                                          monkeypatch):
    monkeypatch.setenv("NODEAGENT_TOKEN", "agent-secret-token")  # the agent's own environment
    monkeypatch.setenv("DATABASE_URL", "postgres://console:agent-secret-db@127.0.0.1/console")
    work_dir = tmp_path / "agent"
    run = run_agent(container_host, work_dir, [job(container_host, 960001, probe_command(work_dir))])

    assert run.exited(960001)["exit_code"] == 0, run.lines(960001)
    found = run.probe(960001)
    assert found["uid"] == found["euid"] and found["uid"] in IdentityPool().uids  # one of --job-uids, never root
    assert found["gid"] == 2_000_000_000 + ALICE["id"] and found["groups"] in ([], [found["gid"]])  # its tenant's group
    assert set(found["caps"].values()) == {"0000000000000000"}, found["caps"]  # no capability at all
    assert found["no_new_privs"] == "1"
    assert not found["setuid_root"] and not found["chown"]
    # who it is and where it may write, without a passwd entry
    assert found["env"]["USER"] == found["env"]["LOGNAME"] == f"job{found['uid']}"
    assert found["env"]["HOME"] == "/simpleai/work/.home" and found["home_writable"]
    assert found["cwd"] == "/simpleai/work" and found["env"]["OUTPUT_DIR"] == "/simpleai/work/output"
    assert found["output_writable"] and not found["vendor_writable"]
    # nothing of the agent: its directory, its spool, its process
    assert not found["sees_work_dir"] and not found["sees_spool"]
    assert not any("pytest" in argv or "nodeagent" in argv for argv in found["processes"]), found["processes"]
    assert len(found["processes"]) <= 4, found["processes"]  # the init, bash, the probe (and its reader of /proc)
    # the environment is the contract and the image's own: nothing of the agent's
    assert not {"NODEAGENT_TOKEN", "DATABASE_URL", "REDIS_URL", "DOCKER_HOST"} & found["environ"].keys()
    assert "agent-secret" not in json.dumps(found["environ"]) and str(work_dir) not in json.dumps(found["environ"])


def test_every_mount_is_the_jobs_own_or_read_only(container_host, tmp_path, file_storage):
    work_dir = tmp_path / "agent"
    run = run_agent(container_host, work_dir, [job(container_host, 960002, probe_command(work_dir), mount_path="/mnt/data")],
                    file_storage_root=file_storage)

    assert run.exited(960002)["exit_code"] == 0, run.lines(960002)
    mounts = run.probe(960002)["mounts"]
    # the engine's own: the image's root, /proc, /sys, /dev, the files it writes for the
    # container (hosts, resolv.conf, its marker) and its init (read-only); everything else is ours
    engine = ("/", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/etc/passwd", "/etc/group", "/run/.containerenv")
    inits = ("/run/podman-init", "/sbin/docker-init")
    ours = {m["point"]: m["options"][0] for m in mounts
            if m["point"] not in engine + inits and not m["point"].startswith(("/proc", "/sys", "/dev"))}
    assert all(m["options"][0] == "ro" for m in mounts if m["point"] in inits)
    assert ours == {"/simpleai/work": "rw", "/simpleai/vendor": "ro", "/simpleai/launchers": "ro", "/mnt/data": "rw"}


# -- File Storage -----------------------------------------------------------------------------


def test_a_mount_path_of_root_shows_the_tenants_share_not_the_nodes_root(container_host, tmp_path, file_storage):
    assert any(Path("/root").iterdir())  # the node's /root has files of its own
    share = file_storage / str(ALICE["id"])
    share.mkdir()
    (share / "dataset.txt").write_text("alice's tokens\n")
    work_dir = tmp_path / "agent"
    command = "ls -A /root; cat /root/dataset.txt; echo written > /root/from-the-job.txt && echo wrote"
    run = run_agent(container_host, work_dir, [job(container_host, 960003, command, mount_path="/root")],
                    file_storage_root=file_storage)

    assert run.exited(960003)["exit_code"] == 0, run.lines(960003)
    lines = run.lines(960003)
    listed = lines[lines.index("[INFO] Starting the command: " + command) + 1:lines.index("alice's tokens")]
    assert listed == ["dataset.txt"]  # the share, and nothing of the node's /root
    assert "wrote" in lines
    made = (share / "from-the-job.txt").stat()
    assert made.st_uid != 0 and made.st_gid == 2_000_000_000 + ALICE["id"]  # the job's user, the tenant's group
    assert stat.S_IMODE(made.st_mode) == 0o660  # the tenant's other jobs may change it; nobody else may read it
    assert stat.S_IMODE(share.stat().st_mode) == 0o2770 and share.stat().st_gid == made.st_gid


def test_host_paths_are_not_reachable_through_the_mount_path(container_host, tmp_path, file_storage):
    """The engine's own socket named as the mount path is the tenant's share (an empty directory
    here); a system directory such as /var/run is refused, saying why."""
    socket_path = str(container_host.socket)
    assert Path(socket_path).is_socket()
    command = (f"test -S {socket_path} && echo a-socket; test -d {socket_path} && echo a-directory; "
               f"ls -A {socket_path} | wc -l; python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
               f"s.connect('{socket_path}')\" 2>/dev/null && echo connected || echo refused")
    work_dir = tmp_path / "agent"
    run = run_agent(container_host, work_dir, [
        job(container_host, 960004, command, mount_path=socket_path),
        job(container_host, 960005, "echo never", mount_path="/var/run/docker.sock", gpu_indices=[1]),
    ], file_storage_root=file_storage)

    assert run.exited(960004)["exit_code"] == 0, run.lines(960004)
    lines = run.lines(960004)
    assert "a-directory" in lines and "a-socket" not in lines and "0" in lines and "refused" in lines
    refused = run.exited(960005)
    assert refused["failure"] == "environment" and refused["exit_code"] is None
    says = "File Storage cannot be mounted on iso-node: /var/run/docker.sock is a system directory"
    assert says in refused["message"]
    assert any(line.startswith("[ERROR] The command could not be started: " + says) for line in run.lines(960005))
    assert "echo never" not in "\n".join(line for line in run.lines(960005) if not line.startswith("[INFO]"))
    assert container_host.containers(job="960005") == []


def test_two_jobs_of_a_tenant_share_the_share_and_another_tenants_job_does_not_see_it(container_host, tmp_path,
                                                                                       file_storage):
    work_dir = tmp_path / "agent"
    first = job(container_host, 960006, "echo from the first job > /mnt/shared/notes.txt; mkdir /mnt/shared/runs",
                mount_path="/mnt/shared")
    second = job(container_host, 960007, "cat /mnt/shared/notes.txt; echo and the second >> /mnt/shared/notes.txt && "
                 "touch /mnt/shared/runs/two && echo appended", mount_path="/mnt/shared")
    stranger = job(container_host, 960008, "ls -A /mnt/shared | wc -l; cat /mnt/shared/notes.txt || echo not-there; "
                   f"ls {file_storage} || echo no-file-storage-root", tenant=BOB, mount_path="/mnt/shared", gpu_indices=[1])

    run = run_agent(container_host, work_dir, [first], [second, stranger], file_storage_root=file_storage)

    for job_id in (960006, 960007, 960008):
        assert run.exited(job_id)["exit_code"] == 0, run.lines(job_id)
    assert "from the first job" in run.lines(960007) and "appended" in run.lines(960007)  # each job has its own user
    assert (file_storage / str(ALICE["id"]) / "notes.txt").read_text() == "from the first job\nand the second\n"
    bobs = run.lines(960008)
    assert "0" in bobs and "not-there" in bobs and "no-file-storage-root" in bobs  # Bob's own, empty share
    assert sorted(p.name for p in file_storage.iterdir()) == [str(ALICE["id"]), str(BOB["id"])]
    assert list((file_storage / str(BOB["id"])).iterdir()) == []


def test_a_mount_path_on_a_node_without_file_storage_fails_with_the_reason(container_host, tmp_path):
    work_dir = tmp_path / "agent"
    run = run_agent(container_host, work_dir, [job(container_host, 960009, "echo never", mount_path="/mnt/data")])

    exited = run.exited(960009)
    says = ("File Storage is not available on iso-node: the job mounts it at /mnt/data, and this node's agent runs "
            "without --file-storage-root")
    assert exited["failure"] == "environment" and says in exited["message"]
    assert any(says in line and line.startswith("[ERROR]") for line in run.lines(960009))
    assert "never" not in [line for line in run.lines(960009)]
    assert container_host.containers(job="960009") == []


def test_the_job_users_files_go_back_to_the_agent_once_its_container_is_gone(container_host, tmp_path):
    work_dir = tmp_path / "agent"
    run = run_agent(container_host, work_dir, [job(container_host, 960010, "echo weights > $OUTPUT_DIR/model.pt; "
                                                    "mkdir -p $HOME/.cache && touch $HOME/.cache/x")])

    assert run.exited(960010)["exit_code"] == 0, run.lines(960010)
    attempt = work_dir / "jobs" / "960010" / "attempt-1" / "master"
    owners = {(path.lstat().st_uid, path.lstat().st_gid) for path in [attempt, *attempt.rglob("*")]}
    assert owners == {(os.geteuid(), os.getegid())}
    assert (attempt / "output" / "model.pt").read_text() == "weights\n"
