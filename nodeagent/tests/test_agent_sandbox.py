"""What a placement's command can reach on a node, tried by real commands of an agent run as root
(the process runtime's sandbox, nodeagent.sandbox): another job's files and processes, the
agent's state, token and environment, the shared caches, /proc, /tmp, the File Storage share."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

from nodeagent.logstream import Outbox
from nodeagent.runner import RunnerContext
from nodeagent.runtimes import LaunchSpec
from nodeagent.sandbox.cgroups import detect
from nodeagent.spool import Spool
from nodeagent.supervisor import Supervisor
from nodeagent.tests.agent_support import (
    FakeConsole,
    make_config,
    make_placement,
    process_runtime,
    running_agent,
    running_console,
    until,
)
from nodeagent.workdirs import attempt_paths, write_marker

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root (as in CI)")

ALICE = {"id": 901, "name": "alice"}
BOB = {"id": 902, "name": "bob"}
# `probe NAME COMMAND…`: one line per try, "escaped" when the command succeeded
PROBE = 'probe() { n=$1; shift; if out=$("$@" 2>&1); then echo "escaped $n: $out"; else echo "refused $n: ${out:0:160}"; fi; }; '


def texts_of(console: FakeConsole, job_id: int) -> list[str]:
    by_seq: dict[int, str] = {}
    for batch in console.of_type("logs"):
        if batch["job_id"] == job_id:
            for seq, _, text in batch["lines"]:
                by_seq.setdefault(seq, text)
    return [by_seq[seq] for seq in sorted(by_seq)]


def exited(console: FakeConsole, job_id: int) -> dict | None:
    return next((m for m in console.of_type("attempt") if m["job_id"] == job_id and m["state"] == "exited"), None)


def host_pids(marker: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found]


@pytest.fixture
def secrets_dir():
    """A root-only directory outside /tmp (whose view is private to each job) for the agent's token file."""
    folder = Path("/run") / f"simpleai-test-{uuid.uuid4().hex[:8]}"
    folder.mkdir(mode=0o700)
    yield folder
    shutil.rmtree(folder)


@pytest.fixture
def env_cache(tmp_path):
    cache = tmp_path / "environments"
    (cache / "envs").mkdir(parents=True)
    return cache


def test_a_job_reaches_nothing_of_another_job_or_of_the_agent(tmp_path, monkeypatch, secrets_dir, env_cache):
    # what `make run` puts into the agent's environment: none of it may reach a job
    monkeypatch.setenv("DATABASE_URL", "postgres://postgres@127.0.0.1/simpleai")
    monkeypatch.setenv("SECRET_KEY", "the-console-secret")
    token_file = secrets_dir / "node.token"
    token_file.write_text("node-token-secret")
    token_file.chmod(0o600)
    work = tmp_path / "node"
    victim = make_placement(job_id=11, tenant=ALICE, command="echo victim-secret > secret.txt; echo ready; exec sleep 3011")
    victim_dir = work / "jobs/11/attempt-1/master"
    agent_pid = os.getpid()
    probes = PROBE + "; ".join([
        f"probe other-workdir cat {victim_dir}/secret.txt",
        f"probe other-workdir-listing ls {victim_dir}",
        # the work dir shows only the way to the job's own directory, none of the agent's state
        f"probe agent-work-dir sh -c '(ls -A {work}; ls -A {work}/jobs) | grep -v -x -e jobs -e 12'",
        f"probe spool ls {work}/spool",
        f"probe marker cat {work}/jobs/11/attempt-1/master.agent.json",
        f"probe token-file cat {token_file}",
        f"probe agent-environ cat /proc/{agent_pid}/environ",
        f"probe agent-cmdline cat /proc/{agent_pid}/cmdline",
        f"probe signal-agent kill -0 {agent_pid}",
        "probe signal-other-job kill -0 VICTIM_PID",
        "probe kill-its-init kill -KILL 1",  # visible, but root's: EPERM
        f"probe write-environment-cache touch {env_cache}/envs/planted",
        "probe write-vendor touch $CHECKPOINT_VENDOR/planted.py",
        "probe become-root python -c 'import os; os.setuid(0)'",
        "probe shadow cat /etc/shadow",
    ]) + "; echo processes: $(ls /proc | grep -c '^[0-9]*$'); echo init: $(tr '\\0' ' ' < /proc/1/cmdline)"
    probes += "; echo mine > /tmp/attacker-file; echo env-start; env; echo env-end"

    async def scenario():
        console = FakeConsole([victim])
        async with running_console(console) as port:
            config = make_config(work, port, env_cache=env_cache)
            async with running_agent(config):
                await until(lambda: "ready" in texts_of(console, 11), what="the victim's first line")
                pid = host_pids("sleep 3011")[0]
                attacker = make_placement(job_id=12, tenant=BOB, command=probes.replace("VICTIM_PID", str(pid)))
                await console.set_desired([victim, attacker])
                await until(lambda: exited(console, 12), timeout=30, what="the attacker's exit")
                victim_alive = exited(console, 11) is None and host_pids("sleep 3011") == [pid]
                await console.set_desired([])
                await until(lambda: exited(console, 11), timeout=30, what="the victim's exit")
        return console, victim_alive

    console, victim_alive = asyncio.run(scenario())
    lines = texts_of(console, 12)
    assert victim_alive
    assert [line for line in lines if line.startswith("escaped")] == []
    refused = {line.split(":")[0].removeprefix("refused ") for line in lines if line.startswith("refused")}
    assert refused == {"other-workdir", "other-workdir-listing", "agent-work-dir", "spool", "marker", "token-file",
                       "agent-environ", "agent-cmdline", "signal-agent", "signal-other-job", "kill-its-init", "write-environment-cache",
                       "write-vendor", "become-root", "shadow"}
    assert any("Read-only file system" in line for line in lines if line.startswith("refused write-environment-cache"))
    assert any("Operation not permitted" in line for line in lines if line.startswith("refused kill-its-init"))
    # its own PID namespace: the launcher's init, bash and the probes; nothing of the node
    processes = int(next(line for line in lines if line.startswith("processes:")).split()[1])
    assert processes <= 5, lines
    assert "launch.py" in next(line for line in lines if line.startswith("init:"))
    env = lines[lines.index("env-start") + 1:lines.index("env-end")]
    names = {line.split("=", 1)[0] for line in env if "=" in line}
    assert not {"DATABASE_URL", "SECRET_KEY", "NODEAGENT_TOKEN"} & names
    assert "node-token-secret" not in "\n".join(lines) and "victim-secret" not in "\n".join(lines)
    assert not Path("/tmp/attacker-file").exists()  # its /tmp was its own
    isolation = next(line for line in lines if line.startswith("[INFO] Isolation: "))
    assert isolation.startswith("[INFO] Isolation: runs as user job")
    assert "group of tenant bob, gid 2000000902" in isolation and "own PID, mount and IPC namespaces" in isolation
    assert "private /tmp" in isolation and "the node's network (shared)" in isolation
    # afterwards: the victim's files are root's again, so whoever gets its user next reads nothing
    found = victim_dir.stat()
    assert (found.st_uid, stat.S_IMODE(found.st_mode)) == (0, 0o700)
    assert (victim_dir / "secret.txt").stat().st_uid == 0
    assert stat.S_IMODE((work / "jobs/11/attempt-1").stat().st_mode) == 0o711
    assert stat.S_IMODE((work / "jobs/11/attempt-1/master.agent.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(work.stat().st_mode) == 0o700


def test_the_job_runs_as_its_own_user_in_its_own_directory_and_reports_what_it_used(tmp_path):
    command = "id -u; id -g; id -G; umask; pwd; echo $HOME $USER $LOGNAME $TMPDIR; stat -c '%a %u' . $HOME; " \
              "grep NoNewPrivs /proc/self/status; df -k --output=size /dev/shm | tail -1; " \
              "head -c 30000000 /dev/zero | tail -c 1 >/dev/null"

    async def scenario():
        console = FakeConsole([make_placement(command=command, tenant=ALICE, shm_size_gb=1)])
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)):
            await until(console.exited, timeout=30, what="the exit")
        return console

    console = asyncio.run(scenario())
    lines = console.texts()
    start = lines.index("[INFO] Starting the command: " + command)
    uid, gid, groups, umask, cwd, env, workdir_mode, home_mode, nnp, shm = lines[start + 2:start + 12]
    workdir = tmp_path / "jobs/7/attempt-1/master"
    assert int(uid) >= 1_900_000_000 and gid == groups == "2000000901" and umask == "0007"
    assert cwd == str(workdir)
    assert env == f"{workdir}/.home job{uid} job{uid} /tmp"
    assert workdir_mode.split() == home_mode.split() == ["700", uid] and nnp.split() == ["NoNewPrivs:", "1"]
    assert shm.strip() == str(2**20)  # its own /dev/shm, of the job's shm size (1 GiB, in KiB)
    assert console.exited()["exit_code"] == 0
    if detect().version:
        resources = next(line for line in lines if line.startswith("[INFO] Resources used: "))
        assert "peak memory" in resources and "CPU time" in resources


def test_a_stop_leaves_no_process_behind_even_a_daemonised_one(tmp_path):
    marker = f"daemon-{uuid.uuid4().hex[:8]}"
    # setsid + double fork, its signals ignored: the classic daemon, out of the job's process group
    command = f"setsid bash -c 'trap \"\" TERM HUP; (exec -a {marker} sleep 3021 &) ; sleep 3022' & echo started; wait"

    async def scenario():
        console = FakeConsole([make_placement(command=command, stop_grace_seconds=2.0)])
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)):
            await until(lambda: "started" in console.texts() and host_pids(marker), what="the daemon")
            await console.set_desired([])
            await until(console.exited, timeout=30, what="the exit")
        return console

    console = asyncio.run(scenario())
    assert console.exited()["signal"] is not None
    assert host_pids(marker) == [] and host_pids("sleep 3022") == []


@pytest.fixture
def mount_path():
    """A mount path inside the jobs; the process runtime makes it on the node (an empty directory) if missing."""
    path = Path("/mnt") / f"simpleai-test-{uuid.uuid4().hex[:8]}"
    yield str(path)
    with contextlib.suppress(OSError):
        path.rmdir()


def test_the_file_storage_share_is_the_tenant_s_own_at_the_mount_path(tmp_path, mount_path):
    shares = tmp_path / "file-storage"
    writer = make_placement(job_id=21, tenant=ALICE, mount_path=mount_path,
                            command=f"echo from-alice > {mount_path}/notes.txt; stat -c '%a %g' {mount_path}/notes.txt")
    reader = make_placement(job_id=22, tenant=ALICE, mount_path=mount_path, command=f"cat {mount_path}/notes.txt")
    stranger = make_placement(job_id=23, tenant=BOB, mount_path=mount_path,
                              command=f"ls -A {mount_path}; cat {shares}/901/notes.txt || echo refused")

    async def scenario():
        console = FakeConsole([writer])
        async with running_console(console) as port, running_agent(make_config(tmp_path / "node", port, file_storage_root=shares)):
            await until(lambda: exited(console, 21), timeout=30, what="the writer")
            await console.set_desired([reader, stranger])
            await until(lambda: exited(console, 22) and exited(console, 23), timeout=30, what="the readers")
        return console

    console = asyncio.run(scenario())
    assert "660 2000000901" in texts_of(console, 21)  # group-owned by the tenant (setgid share), umask 007
    assert "from-alice" in texts_of(console, 22)
    stranger_lines = texts_of(console, 23)
    assert "from-alice" not in stranger_lines and "refused" in stranger_lines
    share = (shares / "901").stat()
    assert (share.st_uid, share.st_gid, stat.S_IMODE(share.st_mode)) == (0, 2000000901, 0o2770)
    assert any(f"File Storage at {mount_path}" in line for line in texts_of(console, 22))


def test_a_mount_path_without_file_storage_fails_the_placement_with_the_reason(tmp_path):
    async def scenario():
        console = FakeConsole([make_placement(tenant=ALICE, mount_path="/mnt/data", command="echo never")])
        async with running_console(console) as port, running_agent(make_config(tmp_path, port)):
            await until(console.exited, timeout=30, what="the exit")
        return console

    console = asyncio.run(scenario())
    report = console.exited()
    assert report["failure"] == "environment" and "without --file-storage-root" in report["message"]
    assert console.states() == ["preparing", "exited"]  # refused before any preparation, with the reason
    assert any(line.startswith("[ERROR] File Storage is not available on test-node: the job mounts it at /mnt/data")
               for line in console.texts())
    assert not any(line.startswith("[INFO] Starting the command") for line in console.texts())


@pytest.mark.parametrize("path", ["/etc/cron.d", "/root/../etc", "data"])
def test_a_mount_path_that_names_the_node_s_system_is_refused(tmp_path, path):
    async def scenario():
        placement = make_placement(tenant=ALICE, mount_path=path, command="echo never")
        console = FakeConsole([placement])
        async with running_console(console) as port, running_agent(make_config(tmp_path, port, file_storage_root=tmp_path / "fs")):
            await until(console.exited, timeout=30, what="the exit")
        return console

    console = asyncio.run(scenario())
    assert console.exited()["failure"] == "environment" and "never" not in console.texts()


@pytest.mark.skipif(detect().version != 1 or "devices" not in detect().bases, reason="needs the cgroup v1 devices controller")
def test_the_devices_controller_denies_what_the_placement_may_not_open(tmp_path):
    """The mechanism GPU nodes use for /dev/nvidia<N>, tried on a harmless device (/dev/full, c 1:7)."""
    command = "head -c 1 /dev/full >/dev/null && echo full-opened; head -c 1 /dev/zero >/dev/null && echo zero-opened"

    async def scenario():
        console = FakeConsole([make_placement(command=command)])
        async with running_console(console) as port:
            config = make_config(tmp_path, port)
            async with running_agent(config, process_runtime(config, extra_device_rules=("c 1:7 rwm",))):
                await until(console.exited, timeout=30, what="the exit")
        return console

    lines = asyncio.run(scenario()).texts()
    assert "zero-opened" in lines and "full-opened" not in lines
    assert any("/dev/full" in line and "Operation not permitted" in line for line in lines)


def test_an_agent_without_isolation_says_so_in_the_job_s_log(tmp_path):
    async def scenario():
        console = FakeConsole([make_placement(command="id -u")])
        async with running_console(console) as port, running_agent(make_config(tmp_path, port, no_isolation=True)):
            await until(console.exited, timeout=30, what="the exit")
        return console

    lines = asyncio.run(scenario()).texts()
    assert "[INFO] Isolation: none (--no-isolation: the agent's own user runs every job)" in lines
    assert "0" in lines  # root's own id: nothing was dropped


def test_a_new_agent_stops_what_an_earlier_one_left_and_takes_its_files_back(tmp_path):
    """supervisor.recover after an agent restart, from the marker the runner wrote."""
    marker = f"orphan-{uuid.uuid4().hex[:8]}"
    placement = make_placement(job_id=31, tenant=ALICE, command=f"echo started; trap '' TERM; (exec -a {marker} sleep 3031)")
    paths = attempt_paths(tmp_path, placement)

    async def scenario():
        earlier = process_runtime()
        paths.create()
        lines: list[str] = []
        spec = LaunchSpec(placement, paths.workdir, paths.output_dir, earlier.environment(placement, paths.output_dir))
        execution = await earlier.start(spec, lines.append)  # nobody waits for it: its agent is gone
        await until(lambda: "started" in lines and host_pids(marker), what="the command")
        write_marker(paths.marker, {"job_id": 31, "attempt": 1, "role": "master", "state": "running", "runtime": "process",
                                    "execution": execution.marker, "grace": 1})
        later = Supervisor(RunnerContext(node_name="n1", work_dir=tmp_path, runtime=process_runtime(),
                                         outbox=Outbox(Spool(tmp_path / "spool")), storage=lambda: None, default_grace=5))
        await later.recover()
        return execution.marker

    left = asyncio.run(scenario())
    assert host_pids(marker) == []
    groups = (left["sandbox"]["cgroup"] or {}).get("dirs", {})  # none on a node without cgroups
    assert not any(Path(path).exists() for path in groups.values())
    assert paths.workdir.stat().st_uid == 0 and (paths.workdir / ".home").stat().st_uid == 0
