"""The Docker runtime's container for a placement: the arguments it gives the engine (user,
mounts, devices, labels) and the environment the command sees in it. No engine runs here; the
same runtime against a real engine is tested in jobs/tests/e2e/test_containers.py and
test_container_isolation.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.environment import LAUNCHERS_DIR, VENDOR_DIR
from nodeagent.runtimes import LaunchSpec
from nodeagent.runtimes.docker import DockerRuntime, build_run_kwargs
from nodeagent.tests.agent_support import make_placement
from nodeagent.tests.docker_fakes import (
    IMAGE,
    USER,
    FakeClient,
    launch_spec,
)

SHARE = (Path("/srv/file-storage/7"), "/mnt/experiment")


# -- the container it asks for --------------------------------------------------------------


def test_it_builds_the_container_of_a_placement(tmp_path):
    spec = launch_spec(tmp_path, gpu_indices=[2, 3], shm_size_gb=64, mount_path="/mnt/experiment", command="torchrun train.py")
    kwargs = build_run_kwargs(spec, real_gpus=True, node_name="gpu-node-3", user=USER, share=SHARE)
    assert kwargs["image"] == IMAGE
    # the tenant's other jobs may change what this one writes in the share (same group)
    assert kwargs["command"] == ["bash", "-c", "umask 0007; torchrun train.py"]
    assert kwargs["environment"] == {
        "JOB_NAME": "demo-job", "HOME": "/simpleai/work/.home", "USER": "job1900000042", "LOGNAME": "job1900000042",
    }
    assert kwargs["shm_size"] == "64g"
    assert kwargs["network_mode"] == "host"
    assert kwargs["init"] is True  # the stop signal reaches the command; children are reaped
    assert kwargs["working_dir"] == "/simpleai/work" and kwargs["detach"] is True
    # the node's directories at fixed paths, read-only but for the job's own; the tenant's share
    # at the job's mount path; nothing else of the node
    assert [dict(mount) for mount in kwargs["mounts"]] == [
        {"Target": "/simpleai/work", "Source": str(spec.workdir), "Type": "bind", "ReadOnly": False},
        {"Target": "/simpleai/vendor", "Source": str(VENDOR_DIR), "Type": "bind", "ReadOnly": True},
        {"Target": "/simpleai/launchers", "Source": str(LAUNCHERS_DIR), "Type": "bind", "ReadOnly": True},
        {"Target": "/mnt/experiment", "Source": "/srv/file-storage/7", "Type": "bind", "ReadOnly": False},
    ]
    assert "volumes" not in kwargs
    # the placement's own user and its tenant's group; no capability, no way back up
    assert kwargs["user"] == "1900000042:2000000007"
    assert kwargs["cap_drop"] == ["ALL"] and kwargs["security_opt"] == ["no-new-privileges"]
    assert kwargs["privileged"] is False and "cap_add" not in kwargs and "devices" not in kwargs
    assert kwargs["labels"] == {
        "simpleai.node": "gpu-node-3", "simpleai.job": "7", "simpleai.job-name": "demo-job",
        "simpleai.attempt": "1", "simpleai.role": "master",
    }
    assert kwargs["name"] == "simpleai-job7-attempt1-master"
    [request] = kwargs["device_requests"]
    assert request["DeviceIDs"] == ["2", "3"] and request["Capabilities"] == [["gpu"]]
    assert request["Driver"] == "" and request["Count"] == 0  # exactly these GPUs, not "any N"


def test_simulated_gpus_request_no_devices_and_no_shm_means_the_default(tmp_path):
    kwargs = build_run_kwargs(launch_spec(tmp_path, shm_size_gb=0, mount_path=""), real_gpus=False, user=USER)
    assert "device_requests" not in kwargs and "shm_size" not in kwargs
    assert len(kwargs["mounts"]) == 3  # working directory, checkpoint library, launcher wrappers


def test_the_contracts_node_paths_are_given_as_the_container_sees_them(tmp_path):
    runtime = DockerRuntime(real_gpus=False, client=FakeClient(), node_name="n")
    spec0 = launch_spec(tmp_path)
    env = runtime.with_launchers(runtime.environment(make_placement(), spec0.output_dir))
    kwargs = build_run_kwargs(launch_spec(tmp_path, env=env), real_gpus=False, user=USER)
    seen = kwargs["environment"]
    assert seen["OUTPUT_DIR"] == "/simpleai/work/output"
    assert seen["CHECKPOINT_VENDOR"] == "/simpleai/vendor"
    assert seen["SIMPLEAI_LAUNCHERS"] == "/simpleai/launchers" and seen["BASH_ENV"] == "/simpleai/launchers/bash_env.sh"
    assert not any(str(tmp_path) in value or str(VENDOR_DIR) in value for value in seen.values())  # no node path


def test_an_output_dir_outside_the_working_directory_gets_a_mount_of_its_own(tmp_path):
    spec = launch_spec(tmp_path)
    spec = LaunchSpec(spec.placement, spec.workdir, tmp_path / "elsewhere", {"OUTPUT_DIR": str(tmp_path / "elsewhere")})
    kwargs = build_run_kwargs(spec, real_gpus=False, user=USER)
    assert kwargs["environment"]["OUTPUT_DIR"] == "/simpleai/output"
    assert {"Target": "/simpleai/output", "Source": str(tmp_path / "elsewhere"), "Type": "bind", "ReadOnly": False} in [
        dict(mount) for mount in kwargs["mounts"]]


def test_a_mount_path_without_its_share_is_never_a_node_path(tmp_path):
    with pytest.raises(ValueError, match="needs its tenant's share"):
        build_run_kwargs(launch_spec(tmp_path, mount_path="/run/docker.sock"), real_gpus=False, user=USER)


def test_the_environment_is_the_contract_without_the_agents_own(tmp_path, monkeypatch):
    monkeypatch.setenv("NODEAGENT_TOKEN", "agent-secret")
    monkeypatch.setenv("HOME", "/root-of-the-agent")
    runtime = DockerRuntime(real_gpus=True, client=FakeClient(), node_name="n")
    env = runtime.environment(make_placement(gpu_indices=[4, 5]), tmp_path / "out")
    assert env["MASTER_ADDR"] == "127.0.0.1" and env["OUTPUT_DIR"] == str(tmp_path / "out")
    assert env["CHECKPOINT_VENDOR"] == str(VENDOR_DIR)
    # the image brings its own PATH and HOME; the device request renumbers the GPUs from 0
    assert not {"NODEAGENT_TOKEN", "HOME", "PATH", "CUDA_VISIBLE_DEVICES"} & env.keys()


def test_installed_requirements_are_mounted_read_only_as_the_python_user_base(tmp_path):
    import dataclasses

    from nodeagent.requirements import PreparedOverlay

    entry = tmp_path / "envs/overlays/abc"
    overlay = PreparedOverlay(entry, cached=True, seconds=0.0, user_base=True)
    spec = launch_spec(tmp_path, env=overlay.activate({}))
    kwargs = build_run_kwargs(dataclasses.replace(spec, requirements=entry), real_gpus=False, user=USER)
    mounts = {mount["Target"]: mount for mount in kwargs["mounts"]}
    assert mounts["/simpleai/requirements"]["Source"] == str(entry) and mounts["/simpleai/requirements"]["ReadOnly"]
    assert kwargs["environment"]["PYTHONUSERBASE"] == "/simpleai/requirements"  # never the node's path


def test_one_tenants_installed_requirements_are_never_another_tenants():
    from nodeagent.runtimes.docker_requirements import image_overlay_key

    same = ("tinypkg==1.0\n", "sha256:1", "")
    assert image_overlay_key("u1", *same) != image_overlay_key("u2", *same)
    assert image_overlay_key("u1", *same) != image_overlay_key("u1", "tinypkg==1.0\n", "sha256:2", "")  # another image
    assert image_overlay_key("u1", *same) == image_overlay_key("u1", *same)
