"""The node's training-environment cache without real package builds (the e2e tests build real
ones): keys, the ready marker, one build at a time, and what a failed step says."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
from pathlib import Path

import pytest

from nodeagent import envcache, nodecache
from nodeagent.envcache import MANIFEST, EnvironmentCache, EnvironmentFailed, environment_key, torch_pin


def spec(*requirements: str, name: str = "pytorch-2.13.0") -> dict:
    return {"name": name, "framework": "pytorch", "framework_label": "PyTorch", "version": "2.13.0",
            "requirements": list(requirements or ("torch==2.13.0", "numpy==2.4.6")), "image": ""}


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, text: str) -> None:
        self.lines.append(text)

    warning = info


def test_the_key_is_the_list_and_the_python_not_the_name_or_the_order():
    python = "/usr/bin/python3.11 cp311"
    a = environment_key(spec("torch==2.13.0", "numpy==2.4.6"), python)
    assert a == environment_key(spec("numpy==2.4.6", "torch==2.13.0", name="renamed"), python)
    assert a != environment_key(spec("torch==2.13.0", "numpy==2.4.5"), python)
    assert a != environment_key(spec("torch==2.13.0", "numpy==2.4.6"), "/opt/python3.12 cp312")
    assert torch_pin(["numpy==2.4.6", "torch==2.13.0"]) == "2.13.0" and torch_pin(["numpy==1"]) is None


def test_deepspeed_on_a_cpu_node_is_its_own_entry_and_other_environments_are_shared(tmp_path):
    deepspeed = spec("torch==2.13.0", "DeepSpeed==0.18.9", name="deepspeed-0.18.9")
    cpu, gpu = EnvironmentCache(tmp_path, cpu_node=True), EnvironmentCache(tmp_path)
    assert cpu.entry(deepspeed) != gpu.entry(deepspeed)  # built with its CPU collective op compiled in
    assert cpu.entry(spec()) == gpu.entry(spec())  # nothing to compile: one build serves both


def fake_build(calls: list[str], seconds: float = 0.3):
    async def build(self, spec, path, log):
        calls.append(spec["name"])
        await asyncio.sleep(seconds)  # long enough for a second job to find the lock taken
        path.mkdir(parents=True)
        (path / MANIFEST).write_text(json.dumps({"name": spec["name"], "prepared_at": 0, "seconds": seconds}))
    return build


def test_two_jobs_needing_one_environment_build_it_once(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(EnvironmentCache, "_build", fake_build(calls))
    monkeypatch.setattr(nodecache, "LOCK_POLL", 0.05)
    cache = EnvironmentCache(tmp_path)
    first, second = Lines(), Lines()

    async def both():
        return await asyncio.gather(cache.prepare(spec(), first), cache.prepare(spec(), second))

    one, two = asyncio.run(both())
    assert calls == ["pytorch-2.13.0"]
    assert one.path == two.path and not one.cached and two.cached
    assert any("preparing it on this node for the first time" in line for line in first.lines)
    assert "Waiting: another job on this node is preparing the training environment pytorch-2.13.0" in second.lines
    assert any("prepared by another job on this node meanwhile, reused" in line for line in second.lines)
    third = Lines()
    assert asyncio.run(cache.prepare(spec(), third)).cached
    assert third.lines[0].startswith("Training environment pytorch-2.13.0 (PyTorch 2.13.0): cached on this node")


def test_a_failed_build_leaves_nothing_and_says_which_step_failed(tmp_path, monkeypatch):
    async def failing(self, spec, path, log):
        path.mkdir(parents=True)
        (path / "half-written").write_text("x")
        await self._run([sys.executable, "-c", "import sys; print('Collecting nope==1'); "
                         "print('ERROR: No matching distribution found for nope==1'); sys.exit(1)"], log, "pip install")

    monkeypatch.setattr(EnvironmentCache, "_build", failing)
    cache, log = EnvironmentCache(tmp_path), Lines()
    with pytest.raises(EnvironmentFailed) as failed:
        asyncio.run(cache.prepare(spec(), log))
    assert str(failed.value) == "pip install failed (exit code 1): ERROR: No matching distribution found for nope==1"
    assert "  Collecting nope==1" in log.lines  # pip's progress reached the job's log
    assert not cache.entry(spec()).exists()  # the next job builds it from scratch
    assert cache.manifest(spec()) is None


def test_an_environment_whose_torch_layer_is_gone_is_not_taken_as_ready(tmp_path):
    cache = EnvironmentCache(tmp_path)
    entry = cache.entry(spec())
    entry.mkdir(parents=True)
    layer = tmp_path / "layers" / "torch-2.13.0-cp311"
    (entry / MANIFEST).write_text(json.dumps({"torch_layer": str(layer)}))
    assert cache.manifest(spec()) is None
    layer.mkdir(parents=True)
    (layer / MANIFEST).write_text("{}")
    assert cache.manifest(spec()) == {"torch_layer": str(layer)}


def test_the_environment_s_programs_come_first(tmp_path):
    prepared = envcache.PreparedEnvironment("deepspeed-0.18.9", tmp_path / "env", cached=True, seconds=0.0)
    env = prepared.activate({"PATH": f"/usr/bin:{tmp_path / 'env' / 'bin'}", "HOME": "/root"})
    assert env["PATH"].split(":") == [str(tmp_path / "env" / "bin"), "/usr/bin"]
    assert env["VIRTUAL_ENV"] == str(tmp_path / "env") and env["SIMPLEAI_ENVIRONMENT"] == "deepspeed-0.18.9"


def test_console_scripts_of_the_layer_run_with_the_environment_s_python(tmp_path):
    layer, bin_dir = tmp_path / "layer", tmp_path / "env" / "bin"
    (layer / "torch-2.13.0.dist-info").mkdir(parents=True)
    (layer / "torch-2.13.0.dist-info" / "entry_points.txt").write_text(
        "[console_scripts]\ntorchrun = torch.distributed.run:main\n")
    bin_dir.mkdir(parents=True)
    nodecache.link_console_scripts(layer, bin_dir)
    script = (bin_dir / "torchrun").read_text()
    assert script.splitlines()[0] == f"#!{bin_dir / 'python'}"
    assert "from torch.distributed.run import main" in script and (bin_dir / "torchrun").stat().st_mode & 0o111


def test_the_cache_is_shared_by_the_agents_of_a_machine_by_default():
    from nodeagent.config import parse_config

    config = parse_config(["--console", "http://c:8000", "--name", "n1"], environ={"NODEAGENT_TOKEN": "t"})
    assert config.env_cache == Path.home() / ".simpleai-agent" / "environments"
    custom = parse_config(["--console", "http://c:8000", "--env-cache", "/srv/envs"], environ={"NODEAGENT_TOKEN": "t"})
    assert custom.env_cache == Path("/srv/envs")


def test_a_line_that_is_not_an_exact_pin_is_never_handed_to_pip(tmp_path):
    log = Lines()
    with pytest.raises(EnvironmentFailed) as failed:
        asyncio.run(EnvironmentCache(tmp_path).prepare(spec("torch==2.13.0", "--index-url=http://evil.example"), log))
    assert "not exact pins: '--index-url=http://evil.example'" in str(failed.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root")
def test_a_cache_an_older_agent_left_writable_is_made_the_agent_s_and_read_only_on_first_use(tmp_path):
    """Code planted in a shared environment would run in every later job of every user."""
    cache = EnvironmentCache(tmp_path)
    entry = cache.entry(spec())
    (entry / "lib").mkdir(parents=True)
    planted = entry / "lib" / "sitecustomize.py"
    planted.write_text("print('hello')\n")
    os.chmod(planted, 0o666)
    os.chown(planted, 1900000077, 1900000077)
    tool = entry / "bin-tool"
    tool.write_text("#!/bin/sh\n")
    os.chmod(tool, 0o4775)  # set-uid, group-writable
    (entry / MANIFEST).write_text(json.dumps({"name": "pytorch-2.13.0", "prepared_at": 0, "seconds": 1}))
    os.chmod(tmp_path / "envs", 0o777)

    prepared = asyncio.run(cache.prepare(spec(), Lines()))

    assert prepared.cached
    for path, mode in ((planted, 0o644), (tool, 0o755), (entry / "lib", 0o755), (tmp_path / "envs", 0o755),
                       (tmp_path / "locks", 0o700)):
        found = path.stat()
        assert (found.st_uid, stat.S_IMODE(found.st_mode)) == (0, mode), path
    assert (entry / nodecache.SECURED).is_file()


def test_what_a_build_made_is_left_readable_by_all_and_writable_by_the_agent_alone(tmp_path):
    """A build's last step before its manifest (secure_tree): under umask 007 pip would leave
    files jobs cannot read; a group-writable one would let a job plant code."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "bin" / "python", 0o770)
    (tmp_path / "site.py").write_text("")
    os.chmod(tmp_path / "site.py", 0o660)
    nodecache.secure_tree(tmp_path)
    assert stat.S_IMODE((tmp_path / "bin" / "python").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "site.py").stat().st_mode) == 0o644
    assert (tmp_path / nodecache.SECURED).is_file()
