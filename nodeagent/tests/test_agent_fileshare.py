"""File Storage on a node (nodeagent.fileshare): which mount paths a job may name, and the
tenant's share the agent makes under the operator's root."""

from __future__ import annotations

import os
import stat

import pytest

from nodeagent.fileshare import check_mount_path, tenant_share

# -- mount paths ------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "normal"), [
    ("/mnt/data", "/mnt/data"),
    ("/mnt/data/", "/mnt/data"),  # a trailing slash is the same directory
    ("/root", "/root"),  # inside the job: the tenant's share, never the node's /root
    ("/home/alice/experiment", "/home/alice/experiment"),
    ("/data", "/data"),
    ("/workspace/my data", "/workspace/my data"),
    ("/tmp/scratch", "/tmp/scratch"),
    ("/var/lib/datasets", "/var/lib/datasets"),
    ("/runs", "/runs"),  # not /run
    ("/etcetera", "/etcetera"),  # not /etc
])
def test_a_plain_absolute_path_is_accepted(path, normal):
    assert check_mount_path(path) == normal


@pytest.mark.parametrize(("path", "says"), [
    ("", "Enter the File Storage mount path"),
    ("mnt/data", "Enter an absolute path"),
    ("./data", "Enter an absolute path"),
    ("/", "cannot be mounted at the root directory"),
    ("//", "normalised"),
    ("//mnt/data", "normalised"),
    ("/mnt/../root", "normalised"),
    ("/mnt/data/..", "normalised"),
    ("/mnt/./data", "normalised"),
    ("/mnt//data", "normalised"),
    ("/mnt/data\x00/etc", "control characters"),
    ("/mnt/da\nta", "control characters"),
    ("/" + "a" * 255, "at most 255 characters"),
])
def test_a_path_that_is_not_a_plain_absolute_path_is_refused(path, says):
    with pytest.raises(ValueError, match=says):
        check_mount_path(path)


@pytest.mark.parametrize("path", [
    "/run/docker.sock", "/var/run/docker.sock", "/run", "/var/run", "/var",
    "/etc", "/etc/shadow", "/proc", "/proc/1/root", "/sys/fs/cgroup", "/dev", "/dev/shm",
    "/usr", "/usr/lib/x86_64-linux-gnu", "/lib", "/lib64", "/bin", "/sbin", "/boot",
])
def test_a_system_directory_or_one_above_it_is_refused(path):
    with pytest.raises(ValueError, match=r"system directory of the job's own file system .*elsewhere, e\.g\. /mnt/data"):
        check_mount_path(path)


@pytest.mark.parametrize("path", ["/simpleai", "/simpleai/work", "/simpleai/work/output", "/simpleai/vendor/datastates"])
def test_a_path_the_runtime_mounts_itself_is_refused(path):
    with pytest.raises(ValueError, match="which the platform mounts inside the job"):
        check_mount_path(path, reserved=["/simpleai/work", "/simpleai/vendor"])


def test_a_path_beside_the_runtimes_own_is_accepted():
    assert check_mount_path("/simpleai-data", reserved=["/simpleai"]) == "/simpleai-data"


def test_the_messages_are_sentences_for_the_user():
    """The console may show them on the form's field as they are."""
    for bad in ("", "x", "/", "/a/../b", "/etc", "/" + "a" * 300):
        with pytest.raises(ValueError) as raised:
            check_mount_path(bad)
        message = str(raised.value)
        assert message[0].isupper() or message.startswith("/"), message
        assert message.endswith("."), message


# -- the tenant's share -----------------------------------------------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="handing a directory to another group needs root")
TENANT_GID = 2_000_000_007


@needs_root
def test_a_missing_share_is_made_for_the_tenants_group(tmp_path):
    root = tmp_path / "file-storage"

    share = tenant_share(root, 7, TENANT_GID)

    assert share == root / "7"
    info = share.stat()
    assert (info.st_uid, info.st_gid) == (0, TENANT_GID)
    assert stat.S_IMODE(info.st_mode) == 0o2770  # setgid: what a job makes stays in the tenant's group
    assert stat.S_IMODE(root.stat().st_mode) & 0o022 == 0  # tenants cannot plant a share's name


@needs_root
def test_an_existing_share_keeps_its_files_and_gets_its_group_and_mode_back(tmp_path):
    share = tmp_path / "7"
    share.mkdir(mode=0o777)
    (share / "dataset.txt").write_text("kept")
    os.chmod(share, 0o777)

    assert tenant_share(tmp_path, 7, TENANT_GID) == share

    assert (share / "dataset.txt").read_text() == "kept"
    assert share.stat().st_gid == TENANT_GID and stat.S_IMODE(share.stat().st_mode) == 0o2770


@needs_root
def test_a_link_in_place_of_a_share_is_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    root = tmp_path / "root"
    root.mkdir()
    (root / "7").symlink_to(elsewhere)

    with pytest.raises(OSError):
        tenant_share(root, 7, TENANT_GID)

    assert elsewhere.stat().st_gid == 0 and stat.S_IMODE(elsewhere.stat().st_mode) == 0o755


@pytest.mark.parametrize("tenant", [0, -1, True, "7", "../7"])
def test_only_a_positive_tenant_id_names_a_share(tmp_path, tenant):
    with pytest.raises(ValueError, match="positive integer"):
        tenant_share(tmp_path, tenant, TENANT_GID)
    assert list(tmp_path.iterdir()) == []
