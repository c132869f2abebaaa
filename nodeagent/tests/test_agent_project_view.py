"""A job's project as a copy-on-write view of the node's cached tree (nodeagent.sandbox.project_view),
tried by real jobs of an agent run as root with real object storage: the job owns its project
(writes, chmods, deletes, adds), the cache that the next job starts from never changes, and the
job cannot reach the cache by its path."""

from __future__ import annotations

import asyncio
import os
import stat
import uuid

import pytest

from nodeagent.tests.agent_support import FakeConsole, make_config, running_agent, running_console, until
from nodeagent.tests.test_agent_workdir import _exited, _placement, _texts

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root (as in CI)")

TRY = """\
import os, pathlib, stat
here = pathlib.Path(".")
print("read:", (here / "config.txt").read_text().strip(), "owner is me:", (here / "config.txt").stat().st_uid == os.getuid())
with open("config.txt", "a") as handle:
    handle.write("changed by the job\\n")
os.chmod("run.sh", 0o755)
os.unlink("data/old.csv")
(here / "data" / "new.csv").write_text("new")
os.rename("lib", "lib2")  # a directory of the project, renamed as on any file system
print("after:", (here / "config.txt").read_text().splitlines(), sorted(p.name for p in (here / "data").iterdir()),
      "run.sh executable:", bool((here / "run.sh").stat().st_mode & stat.S_IXUSR), "lib2:", (here / "lib2" / "x.py").read_text())
try:
    print("cache:", sorted(os.listdir(os.environ["CACHE"])))
except OSError as exc:
    print("cache: unreachable", type(exc).__name__)
"""


@pytest.fixture
def bucket(object_store):
    """Alice's bucket (tenant 901), empty."""
    name = f"simpleai-u901-{uuid.uuid4().hex[:8]}"
    object_store.client().create_bucket(Bucket=name)
    return name


PROJECT = {"try.py": TRY.encode(), "config.txt": b"original\n", "run.sh": b"echo hi\n", "data/old.csv": b"old",
           "lib/x.py": b"x = 1"}


def test_a_job_owns_its_view_of_the_project_and_the_node_s_copy_never_changes(tmp_path, object_store, bucket, monkeypatch):
    monkeypatch.delenv("S3_ENDPOINT_URL", raising=False)
    node = tmp_path / "node"
    cache = node / "projects" / "u901"
    first, second = (_placement(object_store, bucket, job, PROJECT, [], command="python try.py", env={"CACHE": str(cache)})
                     for job in (61, 62))

    async def scenario():
        console = FakeConsole([first])
        async with running_console(console) as port, running_agent(make_config(node, port)):
            await until(lambda: _exited(console, 61), timeout=60, what="the first job")
            await console.set_desired([second])
            await until(lambda: _exited(console, 62), timeout=60, what="the second job")
        return console

    console = asyncio.run(scenario())
    for job in (61, 62):
        lines = _texts(console, job)
        assert _exited(console, job)["exit_code"] == 0, lines
        assert any("laid under the job's working directory (copy-on-write" in line for line in lines), lines
        # each job starts from the project as uploaded: the first job's changes never reached the second
        assert "read: original owner is me: True" in lines, lines
        assert "after: ['original', 'changed by the job'] ['new.csv'] run.sh executable: True lib2: x = 1" in lines, lines
        assert "cache: unreachable PermissionError" in lines or "cache: unreachable FileNotFoundError" in lines, lines
    [tree] = [path / "tree" for path in cache.iterdir() if len(path.name) == 64]
    assert (tree / "config.txt").read_text() == "original\n"
    assert (tree / "data" / "old.csv").read_text() == "old" and not (tree / "data" / "new.csv").exists()
    assert not (tree / "run.sh").stat().st_mode & stat.S_IXUSR
    assert (tree / "lib" / "x.py").exists() and not (tree / "lib2").exists()
    # what the job changed is in its own directory, the agent's again after it
    mine = node / "jobs" / "61" / "attempt-1" / "master"
    assert (mine / "config.txt").read_text() == "original\nchanged by the job\n" and (mine / "data" / "new.csv").exists()
    assert mine.stat().st_uid == 0 and (mine / "config.txt").stat().st_uid == 0
    assert not (node / "jobs" / "61" / "attempt-1" / "master.overlay").exists()
