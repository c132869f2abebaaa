"""The Docker runtime without a Docker engine: how it follows and stops a container, the user and
files it hands each one, what it removes at agent start (the container's arguments:
test_agent_docker_run_args.py; pulls: test_agent_docker_pulls.py).

The same runtime against a real engine (Podman's Docker API and a private registry) is tested
in jobs/tests/e2e/test_containers.py, test_container_isolation.py and test_container_pulls.py.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from docker import errors

from nodeagent.fileshare import FileStorageUnavailable
from nodeagent.jobusers import IdentityPool
from nodeagent.runtimes.docker import DockerExecution, DockerRuntime, find_engine
from nodeagent.tests.docker_fakes import (
    CREDENTIALS,
    IMAGE,
    USER,
    FakeClient,
    FakeContainer,
    launch_spec,
)


@pytest.fixture
def job_users(tmp_path, monkeypatch) -> IdentityPool:
    """The runtime's Unix users, their locks in the test's directory. Handing files to another
    user needs root: without it the handing over is skipped (the real engine's tests check it)."""
    if os.geteuid() != 0:
        monkeypatch.setattr(os, "lchown", lambda *args, **kwargs: None)
    return IdentityPool(lock_dir=tmp_path / "uids")


def _runtime(client, job_users: IdentityPool, **options) -> DockerRuntime:
    return DockerRuntime(real_gpus=False, client=client, node_name="node-a", identities=job_users, **options)


# -- the container while it runs ------------------------------------------------------------



def test_an_execution_ships_both_streams_cut_into_lines_and_reports_the_code():
    container = FakeContainer(stdout=[b"hel", b"lo\nwor", b"ld\n", b"tail"], stderr=[b"warn", b"ing\n"], status=3)
    lines = []

    async def go():
        execution = DockerExecution(container, lines.append)
        assert execution.marker == {"container": container.id, "name": container.name}
        return await execution.wait()

    status = asyncio.run(go())
    assert sorted(lines) == ["hello", "tail", "warning", "world"]  # a half line of one stream never joins the other
    assert lines.index("hello") < lines.index("world") < lines.index("tail")
    assert (status.exit_code, status.signal) == (3, None)
    assert container.removed  # after the exit code and the lines


def test_a_stopped_container_reports_the_signal():
    container = FakeContainer(status=143)

    async def go():
        execution = DockerExecution(container, lambda line: None)
        await execution.stop(7.4)
        return await execution.wait()

    status = asyncio.run(go())
    assert (status.exit_code, status.signal) == (None, 15)
    assert container.stopped == 8  # the grace period, rounded up: never shorter


def test_an_exit_code_above_128_of_a_container_nobody_stopped_is_an_exit_code():
    async def go():
        return await DockerExecution(FakeContainer(status=137), lambda line: None).wait()

    status = asyncio.run(go())
    assert (status.exit_code, status.signal) == (137, None)


class FakeContainers:
    def __init__(self, found=(), fail_run=False):
        self.found, self.fail_run, self.by_name, self.list_filters = list(found), fail_run, {}, None

    def list(self, all, ignore_removed, filters):
        self.list_filters = filters
        return [c for c in self.found if c.labels.get("simpleai.node") == filters["label"].split("=", 1)[1]]

    def get(self, name):
        if name not in self.by_name:
            raise errors.NotFound(name)
        return self.by_name[name]

    def run(self, **kwargs):
        created = FakeContainer()
        created.name = kwargs["name"]
        created.kwargs = kwargs
        self.by_name[kwargs["name"]] = created
        if self.fail_run:
            raise errors.APIError("start failed: no such device")
        return created


def _held(pool: IdentityPool) -> list[int]:
    """The users of `pool` some placement holds now (their lock is taken)."""
    import fcntl

    held = []
    for lock in sorted(pool.lock_dir.glob("*.lock")) if pool.lock_dir.exists() else []:
        with open(lock) as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(int(lock.stem))
    return held


def test_a_container_that_was_created_but_did_not_start_is_removed(tmp_path, job_users):
    client = FakeClient({IMAGE})
    client.containers = FakeContainers(fail_run=True)
    runtime = _runtime(client, job_users)

    async def go():
        await runtime.start(launch_spec(tmp_path), lambda line: None)

    with pytest.raises(errors.APIError, match="no such device"):
        asyncio.run(go())
    assert client.containers.by_name["simpleai-job7-attempt1-master"].removed
    assert _held(job_users) == []  # its user is free again


def test_a_container_runs_as_a_user_of_its_own_given_back_once_it_is_gone(tmp_path, job_users):
    client = FakeClient({IMAGE})
    client.containers = FakeContainers()
    runtime = _runtime(client, job_users)
    spec = launch_spec(tmp_path, tenant={"id": 7, "name": "alice"})
    (spec.workdir / "train.py").write_text("print('hi')")

    async def go():
        execution = await runtime.start(spec, lambda line: None)
        container = client.containers.by_name["simpleai-job7-attempt1-master"]
        uid, gid = (int(part) for part in container.kwargs["user"].split(":"))
        during = {"held": _held(job_users), "owners": _owners(spec.workdir), "marker": dict(execution.marker)}
        await execution.wait()
        return uid, gid, during

    uid, gid, during = asyncio.run(go())
    assert uid in job_users.uids and gid == job_users.tenant_gid(7)
    assert during["held"] == [uid]
    # the agent writes down whose files to take back, should it restart before the exit
    assert during["marker"]["uid"] == uid and during["marker"]["workdir"] == str(spec.workdir)
    assert _held(job_users) == []
    if os.geteuid() == 0:
        assert set(during["owners"].values()) == {(uid, gid)}  # the directory, OUTPUT_DIR, HOME, the script
        assert set(during["owners"]) == {".", "output", ".home", "train.py"}
        assert set(_owners(spec.workdir).values()) == {(0, 0)}  # all back to the agent


def _owners(workdir: Path) -> dict[str, tuple[int, int]]:
    found = {".": (workdir.stat().st_uid, workdir.stat().st_gid)}
    for path in workdir.rglob("*"):
        info = path.lstat()
        found[str(path.relative_to(workdir))] = (info.st_uid, info.st_gid)
    return found


def test_an_agent_that_may_not_hand_over_the_directory_says_to_run_it_as_root(tmp_path, job_users, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "lchown", refuse)
    client = FakeClient({IMAGE})
    client.containers = FakeContainers()

    async def go():
        await _runtime(client, job_users).start(launch_spec(tmp_path), lambda line: None)

    with pytest.raises(PermissionError, match=r"a Unix user of its own.*\(run the agent as root\)"):
        asyncio.run(go())
    assert client.containers.by_name == {} and _held(job_users) == []


def test_a_job_without_a_tenant_gets_a_group_of_its_own(tmp_path, job_users):
    client = FakeClient({IMAGE})
    client.containers = FakeContainers()

    async def go():
        await (await _runtime(client, job_users).start(launch_spec(tmp_path), lambda line: None)).wait()

    asyncio.run(go())
    uid, gid = client.containers.by_name["simpleai-job7-attempt1-master"].kwargs["user"].split(":")
    assert uid == gid


@pytest.mark.parametrize(("mount_path", "root", "tenant", "says"), [
    ("/mnt/data", None, {"id": 7, "name": "alice"},
     "File Storage is not available on node-a: the job mounts it at /mnt/data, and this node's agent runs without "
     "--file-storage-root"),
    ("/run/docker.sock", "share-root", {"id": 7, "name": "alice"},
     "File Storage cannot be mounted on node-a: /run/docker.sock is a system directory"),
    ("/mnt/../etc", "share-root", {"id": 7, "name": "alice"}, "File Storage cannot be mounted on node-a: Enter a normalised"),
    ("/simpleai/work/data", "share-root", {"id": 7, "name": "alice"}, "which the platform mounts inside the job"),
    ("/mnt/data", "share-root", None, "the console did not say whose job this is"),
])
def test_a_mount_path_the_node_cannot_serve_fails_before_anything_runs(tmp_path, job_users, mount_path, root, tenant,
                                                                        says):
    client = FakeClient()
    client.containers = FakeContainers()
    runtime = _runtime(client, job_users, file_storage_root=tmp_path / root if root else None)
    overrides = {"tenant": tenant} if tenant else {}

    async def go():
        await runtime.start(launch_spec(tmp_path, mount_path=mount_path, **overrides), lambda line: None)

    with pytest.raises(FileStorageUnavailable) as raised:
        asyncio.run(go())
    assert says in str(raised.value)
    assert client.api.calls == [] and client.containers.by_name == {}  # nothing pulled, nothing created
    assert _held(job_users) == []
    assert not (tmp_path / "share-root").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a share to a tenant's group needs root")
def test_the_tenants_share_is_made_and_mounted_at_the_mount_path(tmp_path, job_users):
    client = FakeClient({IMAGE})
    client.containers = FakeContainers()
    runtime = _runtime(client, job_users, file_storage_root=tmp_path / "file-storage")

    async def go():
        spec = launch_spec(tmp_path, mount_path="/root/", tenant={"id": 7, "name": "alice"})
        await (await runtime.start(spec, lambda line: None)).wait()

    asyncio.run(go())
    share = tmp_path / "file-storage" / "7"
    assert share.stat().st_gid == job_users.tenant_gid(7) and share.stat().st_mode & 0o7777 == 0o2770
    mounts = [dict(m) for m in client.containers.by_name["simpleai-job7-attempt1-master"].kwargs["mounts"]]
    assert {"Target": "/root", "Source": str(share), "Type": "bind", "ReadOnly": False} in mounts


def test_at_start_it_removes_its_nodes_containers_it_did_not_start():
    stray = FakeContainer(labels={"simpleai.node": "node-a", "simpleai.job": "3"})
    stray.name = "simpleai-job3-attempt1-master"
    current = FakeContainer(labels={"simpleai.node": "node-a", "simpleai.job": "7"})
    other_node = FakeContainer(labels={"simpleai.node": "node-b"})
    client = FakeClient()
    client.containers = FakeContainers([stray, current, other_node])
    runtime = DockerRuntime(real_gpus=False, client=client, node_name="node-a")
    runtime._names.add(current.name)  # started by this agent process meanwhile

    removed = asyncio.run(runtime.remove_strays(grace=4))

    assert removed == ["simpleai-job3-attempt1-master"]
    assert client.containers.list_filters == {"label": "simpleai.node=node-a"}
    assert stray.stopped == 4 and stray.removed
    assert not current.removed and not other_node.removed


@pytest.mark.skipif(os.geteuid() != 0, reason="handing files to another user needs root")
def test_a_file_the_warm_pool_keeps_stays_the_agents_and_links_are_not_followed(tmp_path):
    """The job reads a kept file and may replace it; it cannot change the copy a later job starts from."""
    from nodeagent.runtimes.container_spec import hand_back, hand_over

    spec = launch_spec(tmp_path)
    kept = tmp_path / "warm" / "dataset.bin"
    kept.parent.mkdir()
    kept.write_text("kept")
    os.link(kept, spec.workdir / "dataset.bin")
    (spec.workdir / "train.py").write_text("fresh")
    outside = tmp_path / "outside.txt"
    outside.write_text("the node's")
    (spec.workdir / "link").symlink_to(outside)

    hand_over(spec.workdir, spec.output_dir, USER.uid, USER.gid)

    owners = _owners(spec.workdir)
    assert owners["dataset.bin"] == (0, 0) and kept.stat().st_uid == 0
    assert owners["train.py"] == owners["link"] == owners["output"] == owners[".home"] == owners["."] == (USER.uid, USER.gid)
    assert outside.stat().st_uid == 0  # the link itself, not what it points at

    hand_back(spec.workdir, spec.output_dir, USER.uid)

    assert set(_owners(spec.workdir).values()) == {(0, 0)}


@pytest.mark.skipif(os.geteuid() != 0, reason="handing files to another user needs root")
@pytest.mark.parametrize("in_range", [True, False])
def test_an_orphans_files_go_back_to_the_agent_once_it_is_stopped(tmp_path, job_users, in_range):
    """After an agent restart (supervisor.recover), with the marker the runner wrote."""
    spec = launch_spec(tmp_path)
    uid = job_users.uids[5] if in_range else 4242  # a marker never hands back a user outside the job range
    (spec.output_dir / "model.pt").write_text("weights")
    for path in (spec.workdir, spec.output_dir, spec.output_dir / "model.pt"):
        os.chown(path, uid, 2_000_000_007)
    orphan = FakeContainer()
    client = FakeClient()
    client.containers = FakeContainers()
    client.containers.by_name[orphan.id] = orphan
    marker = {"container": orphan.id, "name": orphan.name, "uid": uid, "workdir": str(spec.workdir),
              "output_dir": str(spec.output_dir)}

    asyncio.run(_runtime(client, job_users).kill_orphan(marker, grace=1))

    assert orphan.stopped == 1 and orphan.removed
    expected = (0, 0) if in_range else (uid, 2_000_000_007)
    assert set(_owners(spec.workdir).values()) == {expected}


def test_no_engine_answering_means_no_engine():
    assert find_engine({"DOCKER_HOST": "unix:///nonexistent/docker.sock"}) is None


def test_a_start_without_preparation_pulls_an_image_the_engine_no_longer_has(tmp_path, job_users):
    """A warm start skips preparation; the engine must not be left to pull without the credentials."""
    client = FakeClient()
    client.containers = FakeContainers()
    runtime = _runtime(client, job_users)
    lines: list[str] = []

    async def go():
        await runtime.start(launch_spec(tmp_path, registry=CREDENTIALS), lines.append)

    asyncio.run(go())
    assert client.api.calls == [("registry.example.com/team/train", "1", CREDENTIALS)]
    assert lines[0] == f"[INFO] Pulling image {IMAGE} as registry user trainer"
    assert lines[1].startswith(f"[INFO] Pulled image {IMAGE} (id ")


def test_a_start_after_preparation_does_not_pull_again(tmp_path, job_users):
    client = FakeClient({IMAGE})
    client.containers = FakeContainers()

    async def go():
        await _runtime(client, job_users).start(launch_spec(tmp_path), lambda line: None)

    asyncio.run(go())
    assert client.api.calls == [] and "simpleai-job7-attempt1-master" in client.containers.by_name


def test_a_long_line_that_arrives_at_once_is_still_cut_into_pieces():
    """Under load several chunks reach the buffer before the pump runs: pieces stay under the limit."""
    from nodeagent.runtimes.base import LINE_LIMIT

    container = FakeContainer(stdout=[b"x" * 150_000 + b"\nafter\n"])
    lines: list[str] = []

    async def go():
        await DockerExecution(container, lines.append).wait()

    asyncio.run(go())
    assert "".join(lines[:-1]) == "x" * 150_000 and lines[-1] == "after"
    assert len(lines) == 4 and max(len(line) for line in lines) <= LINE_LIMIT
