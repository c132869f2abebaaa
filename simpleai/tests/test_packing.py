"""A project as a tarball: what goes in, what stays out, the same bytes for the same files."""

from __future__ import annotations

import os
import tarfile

import pytest

from simpleai import cache, packing
from simpleai.errors import UsageError


def project(root, files: dict[str, str | bytes]):
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body.encode() if isinstance(body, str) else body)
    return root


def packed_names(root) -> list[str]:
    packed = packing.pack(packing.list_project(root))
    try:
        with tarfile.open(packed.path) as tar:
            return tar.getnames()
    finally:
        packed.path.unlink()


def test_git_and_ignored_files_stay_out_and_ignore_files_go_in(tmp_path):
    project(tmp_path, {
        "train.py": "import model\n", "model.py": "", "config/small.py": "", "data/raw.csv": "x", "data/keep.csv": "y",
        ".git/HEAD": "ref", "__pycache__/model.cpython-311.pyc": "", "checkpoints/step-1.pt": "w",
        "notes/todo.md": "", "notes/big.bin": "", "sub/.gitignore": "*.log\n", "sub/run.log": "", "sub/ok.txt": "",
        ".gitignore": "__pycache__/\n*.pyc\ndata/*\n!data/keep.csv\n/checkpoints\n",
        ".simpleaiignore": "notes/*.bin\n",
    })
    assert packed_names(tmp_path) == [
        ".gitignore", ".simpleaiignore", "config", "config/small.py", "data", "data/keep.csv", "model.py",
        "notes", "notes/todo.md", "sub", "sub/.gitignore", "sub/ok.txt", "train.py",
    ]


def test_the_same_files_give_the_same_bytes_whatever_their_times_and_modes(tmp_path):
    files = {"train.py": "print('hi')\n", "lib/util.py": "X = 1\n", "run.sh": "#!/bin/sh\n"}
    one, two = project(tmp_path / "one", files), project(tmp_path / "two", files)
    os.chmod(one / "run.sh", 0o755)
    os.chmod(two / "run.sh", 0o700)  # executable either way
    os.chmod(two / "train.py", 0o600)
    os.utime(two / "train.py", (1, 1))
    first, second = packing.pack(packing.list_project(one)), packing.pack(packing.list_project(two))
    assert first.path.read_bytes() == second.path.read_bytes()
    assert first.sha256 == second.sha256 and (first.files, first.size) == (3, 28)
    with tarfile.open(first.path) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert {name: (oct(m.mode), m.mtime, m.uid, m.uname) for name, m in members.items()} == {
        "lib": ("0o755", 0, 0, ""), "lib/util.py": ("0o644", 0, 0, ""), "run.sh": ("0o755", 0, 0, ""),
        "train.py": ("0o644", 0, 0, "")}
    (two / "train.py").write_text("print('changed')\n")
    assert packing.pack(packing.list_project(two)).sha256 != first.sha256


def test_a_link_inside_the_project_stays_a_link_one_leading_out_is_left_out(tmp_path):
    root = project(tmp_path / "p", {"configs/base.yaml": "a: 1\n"})
    (root / "config.yaml").symlink_to("configs/base.yaml")
    (root / "data").symlink_to(tmp_path)
    (root / "passwd").symlink_to("../../../etc/passwd")
    listing = packing.list_project(root)
    assert [(e.path, e.kind, e.target) for e in listing.entries] == [
        ("config.yaml", "link", "configs/base.yaml"), ("configs", "dir", ""), ("configs/base.yaml", "file", "")]
    assert listing.skipped_links == [f"data -> {tmp_path}", "passwd -> ../../../etc/passwd"]


def test_a_project_over_the_cap_is_refused_naming_its_biggest_files(tmp_path):
    root = project(tmp_path, {"train.py": "x" * 10, "data/big.bin": b"\0" * (3 * packing.MiB),
                              "weights.pt": b"\0" * (2 * packing.MiB)})
    listing = packing.list_project(root)
    with pytest.raises(UsageError) as refused:
        packing.check_size(listing, packing.max_bytes({"SIMPLEAI_MAX_WORKDIR_MB": "4"}))
    message = str(refused.value)
    assert "is 5.0 MB, over the 4.0 MB limit (SIMPLEAI_MAX_WORKDIR_MB)" in message
    assert "the biggest files: data/big.bin (3.0 MB), weights.pt (2.0 MB), train.py (10 B)" in message
    assert ".simpleaiignore" in message and "--input" in message
    packing.check_size(listing, packing.max_bytes({}))  # 1 GiB by default


@pytest.mark.parametrize("value", ["lots", "0"])
def test_a_bad_cap_is_a_usage_error(value):
    with pytest.raises(UsageError, match="SIMPLEAI_MAX_WORKDIR_MB must be"):
        packing.max_bytes({"SIMPLEAI_MAX_WORKDIR_MB": value})


def test_a_workdir_that_is_not_a_directory_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="is not a directory: --workdir names your project's directory"):
        packing.list_project(tmp_path / "nope")


def test_binaries_are_stored_code_is_compressed_and_any_gunzip_reads_the_members_as_one(tmp_path):
    import gzip
    import random

    root = project(tmp_path / "p", {"weights.bin": random.Random(1).randbytes(3 * packing.MiB),
                                    "src/model.py": "def forward(self, x):\n    return self.layer(x)\n" * 40_000})
    packed = packing.pack(packing.list_project(root))
    raw = packed.path.read_bytes()
    assert raw[:10] == packing.GZIP_HEADER  # no name, no time, no OS: the same bytes everywhere
    assert 3 * packing.MiB < packed.compressed < 3.2 * packing.MiB  # the binary as it is, the code to a few KB
    with gzip.open(packed.path) as members, tarfile.open(fileobj=members, mode="r|") as tar:
        assert [(m.name, m.size) for m in tar] == [("src", 0), ("src/model.py", 1_880_000), ("weights.bin", 3 * packing.MiB)]
    packed.path.unlink()


def test_the_fingerprint_changes_with_any_file_and_stays_for_an_unchanged_project(tmp_path):
    root = project(tmp_path, {"train.py": "a", "lib/x.py": "b"})
    first = packing.fingerprint(packing.list_project(root))
    assert packing.fingerprint(packing.list_project(root)) == first
    (root / "lib" / "x.py").write_text("c")  # same size
    assert packing.fingerprint(packing.list_project(root)) != first


def test_only_the_files_that_changed_are_read_again_for_the_address(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    root = project(tmp_path / "p", {"a.py": "a = 1\n", "lib/b.py": "b = 2\n"})
    listing = packing.list_project(root)
    sha, digests = packing.project_sha256(listing, cache.known_files(env, listing))
    cache.remember_files(env, listing, digests)
    (root / "lib" / "b.py").write_text("b = 3\n")
    listing = packing.list_project(root)
    known = cache.known_files(env, listing)
    assert set(known) == {"a.py"}  # the changed file's digest is not trusted
    changed, _ = packing.project_sha256(listing, known)
    assert changed != sha and changed == packing.project_sha256(listing)[0]  # the same address as reading them all
    assert changed == packing.pack(listing, into=tmp_path).sha256  # and as the packing names what it packed
