"""The node's caches of projects, inputs and requirements overlays under a size cap
(nodeagent.cachecap): least recently used first, never what a placement holds, an input's blobs
once no tree links them; and an agent with --cache-max-gb trims after a job's preparation."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

from nodeagent.cachecap import Uses, entries, trim
from nodeagent.config import parse_config
from nodeagent.tests.agent_support import FakeConsole, make_config, running_agent, running_console, until
from nodeagent.tests.test_agent_project_view import bucket as bucket  # the fixture
from nodeagent.tests.test_agent_workdir import _exited, _placement, _texts

MB = 1_000_000


def _project(work_dir: Path, tenant: str, name: str, size: int, used: float) -> Path:
    entry = work_dir / "projects" / tenant / (name * 64)[:64]
    (entry / "tree").mkdir(parents=True)
    (entry / "tree" / "weights.bin").write_bytes(os.urandom(size))
    (entry / "complete").write_text(f"1 {size}\n")
    uses = Uses()
    uses.hold(entry)  # leaves its use file, then given this time
    uses.release()
    os.utime(entry.with_name(entry.name + ".use"), (used, used))
    return entry


def _input(work_dir: Path, tenant: str, key: str, blobs: dict[str, int], used: float) -> Path:
    root = work_dir / "inputs" / tenant
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    entry = root / "trees" / key
    (entry / "tree").mkdir(parents=True)
    for name, size in blobs.items():
        if not (root / "blobs" / name).exists():
            (root / "blobs" / name).write_bytes(os.urandom(size))
        os.link(root / "blobs" / name, entry / "tree" / name)
    (entry / "complete").write_text("{}")
    os.utime(entry, (used, used))
    return entry


def test_the_least_recently_used_go_first_until_the_caches_fit(tmp_path):
    now = time.time()
    old, middle, new = (_project(tmp_path, "u1", name, 3 * MB, now - age) for name, age in (("a", 300), ("b", 200), ("c", 100)))
    evicted = trim(tmp_path, None, cap=7 * MB)
    assert [entry.path for entry in evicted] == [old]
    assert not old.exists() and middle.exists() and new.exists()
    assert not old.with_name(old.name + ".use").exists()
    assert trim(tmp_path, None, cap=7 * MB) == []  # it fits now


def test_what_a_placement_holds_stays_even_over_the_cap(tmp_path):
    now = time.time()
    held, other = _project(tmp_path, "u1", "a", 3 * MB, now - 300), _project(tmp_path, "u2", "b", 3 * MB, now - 200)
    uses = Uses()
    uses.hold(held)  # a running job's (and it is now the most recently used)
    os.utime(held.with_name(held.name + ".use"), (now - 400, now - 400))
    evicted = trim(tmp_path, None, cap=1 * MB)
    assert [entry.path for entry in evicted] == [other]
    assert (held / "tree" / "weights.bin").exists()
    uses.release()
    assert [entry.path for entry in trim(tmp_path, None, cap=1 * MB)] == [held]


def test_a_placement_waiting_on_an_eviction_locks_the_entry_it_then_finds(tmp_path):
    """The holder locks before it looks: an entry evicted meanwhile is downloaded again and held."""
    entry = _project(tmp_path, "u1", "a", MB, time.time() - 100)
    trim(tmp_path, None, cap=0)
    assert not entry.exists()
    uses = Uses()
    uses.hold(entry)  # the new use file
    (entry / "tree").mkdir(parents=True)
    (entry / "tree" / "x").write_bytes(os.urandom(MB))
    assert trim(tmp_path, None, cap=0) == [] and (entry / "tree" / "x").exists()
    done = threading.Event()
    threading.Thread(target=lambda: (Uses().hold(entry), done.set()), daemon=True).start()
    assert done.wait(10)  # shared: a second placement of the same project is not held up
    uses.release()


def test_an_input_s_blobs_go_once_no_tree_links_them(tmp_path):
    now = time.time()
    first = _input(tmp_path, "u1", "k1", {"shared": MB, "only-first": 2 * MB}, now - 300)
    second = _input(tmp_path, "u1", "k2", {"shared": MB, "only-second": MB}, now - 100)
    assert {entry.path: entry.size // MB for entry in entries(tmp_path, None)} == {first: 2, second: 1}
    evicted = trim(tmp_path, None, cap=3 * MB)
    assert [entry.path for entry in evicted] == [first]
    assert sorted(os.listdir(tmp_path / "inputs" / "u1" / "blobs")) == ["only-second", "shared"]
    assert (second / "tree" / "shared").read_bytes()


def test_requirements_overlays_count_and_go_too(tmp_path):
    env_cache = tmp_path / "envs"
    overlay = env_cache / "overlays" / ("f" * 24)
    (overlay / "lib").mkdir(parents=True)
    (overlay / "lib" / "pkg.py").write_bytes(os.urandom(2 * MB))
    os.utime(overlay, (time.time() - 1000,) * 2)
    project = _project(tmp_path, "u1", "a", 2 * MB, time.time())
    assert [entry.path for entry in trim(tmp_path, env_cache, cap=3 * MB)] == [overlay]
    assert project.exists()


def test_the_cap_is_the_agent_s_option():
    config = parse_config(["--console", "http://console:8000", "--cache-max-gb", "50"], {"NODEAGENT_TOKEN": "t"})
    assert config.cache_max_gb == 50.0
    assert parse_config(["--console", "http://console:8000"], {"NODEAGENT_TOKEN": "t"}).cache_max_gb is None


def test_an_agent_with_a_cap_keeps_the_running_job_s_project_and_evicts_the_older(tmp_path, object_store, bucket, monkeypatch):
    monkeypatch.delenv("S3_ENDPOINT_URL", raising=False)
    node = tmp_path / "node"
    big = os.urandom(3 * MB)
    first = _placement(object_store, bucket, 71, {"train.py": b"print('one')\n", "w.bin": big}, [])
    second = _placement(object_store, bucket, 72, {"train.py": b"import time; print('two'); time.sleep(1)\n", "w.bin": big}, [])

    async def scenario():
        console = FakeConsole([first])
        async with running_console(console) as port, running_agent(make_config(node, port, cache_max_gb=0.004)):
            await until(lambda: _exited(console, 71), timeout=60, what="the first job")
            await console.set_desired([second])
            await until(lambda: _exited(console, 72), timeout=60, what="the second job")
        return console

    console = asyncio.run(scenario())
    assert _exited(console, 72)["exit_code"] == 0, _texts(console, 72)
    assert "two" in _texts(console, 72)
    kept = [path.name for path in (node / "projects" / "u901").iterdir() if len(path.name) == 64]
    assert kept == [second["workdir"]["sha256"]]  # the first job's project went, the running one's stayed
