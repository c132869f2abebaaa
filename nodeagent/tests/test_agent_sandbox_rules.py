"""The sandbox's decisions as plain functions: which cgroups a node has, which GPUs a placement
may open, which directories must be covered to reach what a job needs."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from nodeagent.sandbox import launch
from nodeagent.sandbox.cgroups import detect
from nodeagent.sandbox.devices import deny_rules, gpu_minors

V1_MOUNTS = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/devices cgroup rw,relatime,devices 0 0
cgroup /sys/fs/cgroup/freezer cgroup rw,relatime,freezer 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
V1_OWN = """\
6:pids:/
5:freezer:/
4:devices:/system.slice/agent.service
3:memory:/system.slice/agent.service
2:cpu,cpuacct:/system.slice/agent.service
1:name=systemd:/system.slice/agent.service
0::/
"""


def test_cgroup_v1_groups_go_under_the_agent_s_own_in_each_hierarchy(tmp_path):
    (tmp_path / "sys/fs/cgroup/unified").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/unified/cgroup.controllers").write_text("")  # v2 mounted, but holds no controller
    found = detect(V1_MOUNTS, V1_OWN, root=tmp_path)
    assert found.version == 1
    assert found.controllers == ("memory", "cpu", "cpuacct", "pids", "freezer", "devices")
    assert found.bases["memory"] == tmp_path / "sys/fs/cgroup/memory/system.slice/agent.service/simpleai"
    assert found.bases["cpu"] == found.bases["cpuacct"] == tmp_path / "sys/fs/cgroup/cpu,cpuacct/system.slice/agent.service/simpleai"
    assert found.bases["pids"] == tmp_path / "sys/fs/cgroup/pids/simpleai"
    group = found.group("job1900000123")
    assert len(group.directories) == 5  # cpu and cpuacct share one
    assert found.describe() == "cgroup v1 (memory, cpu, pids, freezer, devices)"


def test_cgroup_v2_with_controllers_is_preferred(tmp_path):
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    found = detect("cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n", "0::/agent.slice/agent.service\n",
                   root=tmp_path)
    assert (found.version, found.controllers) == (2, ("memory", "cpu", "pids"))
    assert found.bases["unified"] == tmp_path / "sys/fs/cgroup/agent.slice/agent.service/simpleai"


def test_a_node_without_cgroups_says_what_is_missing(tmp_path):
    found = detect("proc /proc proc rw 0 0\n", "", root=tmp_path)
    assert found.version == 0
    assert found.describe().startswith("no cgroup of its own (this node mounts no cgroup hierarchy with controllers: "
                                       "no accounting, no device isolation")


def test_v1_without_a_freezer_says_so(tmp_path):
    mounts = "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\ncgroup /sys/fs/cgroup/pids cgroup rw,pids 0 0\n"
    found = detect(mounts, "3:memory:/\n2:pids:/\n", root=tmp_path)
    assert found.describe() == "cgroup v1 (memory, pids); no cpu, freezer, devices controller on this node"


def test_a_placement_may_open_only_its_own_gpus():
    rules = deny_rules([2, 3])
    assert "c 195:0 rwm" in rules and "c 195:1 rwm" in rules and "c 195:4 rwm" in rules
    assert "c 195:2 rwm" not in rules and "c 195:3 rwm" not in rules
    # nvidiactl (255) and nvidia-modeset (254) stay open, and nvidia-uvm has a major of its own
    assert not any(rule.startswith(("c 195:254 ", "c 195:255 ")) for rule in rules)
    assert len(rules) == 254 - 2


def test_gpu_indices_become_the_driver_s_minor_numbers(tmp_path):
    for bus, minor in (("0000:3b:00.0", 1), ("0000:18:00.0", 0), ("0000:86:00.0", 3)):
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "information").write_text(f"Model: NVIDIA H100\nIRQ: 1\nDevice Minor: {minor}\nBus Location: {bus}\n")
    assert gpu_minors([0, 1, 2], driver=tmp_path) == [0, 1, 3]  # PCI bus order, as NVML numbers them
    assert gpu_minors([0, 1], driver=tmp_path / "none") == [0, 1]  # no driver: the index itself


@pytest.fixture
def passable(tmp_path):
    """A directory every user may pass (pytest's own tmp_path lies under a 0700 one)."""
    folder = Path(tempfile.mkdtemp(dir="/var/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def test_only_directories_the_job_cannot_pass_are_covered(passable):
    closed = passable / "closed"
    (closed / "inner").mkdir(parents=True)
    closed.chmod(0o700)
    (passable / "open").mkdir()
    assert launch.first_wall(str(closed / "inner" / "x"), 1900000001, 2000000001) == str(closed)
    assert launch.first_wall(str(passable / "open" / "x"), 1900000001, 2000000001) is None
    if os.geteuid() == 0:  # the tenant's group may pass, others may not
        group = passable / "group"
        group.mkdir(mode=0o710)
        os.chown(group, 0, 2000000001)
        assert launch.first_wall(str(group / "x"), 1900000001, 2000000001) is None
        assert launch.first_wall(str(group / "x"), 1900000001, 2000000002) == str(group)
    assert launch.outermost({"/tmp", "/tmp/a/b", "/root", "/var/tmp"}) == {"/tmp", "/root", "/var/tmp"}


def test_links_on_the_way_are_found_so_they_still_resolve_in_the_job_s_view(tmp_path):
    (tmp_path / "real" / "bin").mkdir(parents=True)
    (tmp_path / "venv").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "bin" / "python").symlink_to("python3")
    links = launch.links_on_the_way(str(tmp_path / "venv" / "bin" / "python"))
    assert links[:2] == [(str(tmp_path / "venv"), str(tmp_path / "real")), (str(tmp_path / "real" / "bin" / "python"), "python3")]


def test_the_launcher_imports_nothing_it_need_not():
    """Every job start pays for the launcher's imports (json, contextlib and signal cost
    milliseconds each); and nothing may be imported after the command's user is set."""
    source = Path(launch.__file__).read_text()
    imports = sorted(line.split()[1] for line in source.splitlines() if line.startswith(("import ", "from ")))
    assert imports == ["__future__", "_signal", "ctypes", "marshal", "os", "project_view", "select", "stat", "sys"]
    assert "\n    import " not in source and "\n        import " not in source
    beside = (Path(launch.__file__).parent / "project_view.py").read_text()  # imported by the launcher, by path
    imports = sorted(line.split()[1] for line in beside.splitlines() if line.startswith(("import ", "from ")))
    assert imports == ["__future__", "ctypes", "os", "struct", "sys"]
    assert "\n    import " not in beside and "\n        import " not in beside
