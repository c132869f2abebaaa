"""The workdir, inputs and requirements pieces on their own: unpacking, copies, names, progress."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from nodeagent.inputs import InputError, format_progress, safe_relative, variable
from nodeagent.jobusers import JobIdentity
from nodeagent.projects import ProjectError, copy_tree, format_bytes, safe_unpack, unsafe_member
from nodeagent.requirements import local_find_links, overlay_key, pip_error
from nodeagent.runtimes import LaunchSpec
from nodeagent.runtimes.container_spec import build_run_kwargs, places
from nodeagent.tests.agent_support import make_placement


def _archive(path: Path, entries: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def test_a_project_unpacks_with_its_tree_and_without_dangerous_modes(tmp_path):
    archive = _archive(tmp_path / "p.tar.gz", [
        (_file("train.py"), b"import model\n"), (_file("pkg/model.py", 0o4777), b"X = 1\n"),
        (_link("pkg/alias.py", "model.py"), None), (_file("config/base.yaml"), b"lr: 1\n"),
    ])
    files, total = safe_unpack(archive, tmp_path / "tree")
    tree = tmp_path / "tree"
    assert (files, total) == (3, len(b"import model\n") + len(b"X = 1\n") + len(b"lr: 1\n"))
    assert (tree / "pkg/alias.py").read_text() == "X = 1\n" and os.readlink(tree / "pkg/alias.py") == "model.py"
    mode = stat.S_IMODE((tree / "pkg/model.py").stat().st_mode)
    assert not mode & (stat.S_ISUID | stat.S_IWGRP | stat.S_IWOTH)


@pytest.mark.parametrize(("entry", "says"), [
    (_file("/etc/cron.d/x"), "an absolute path"),
    (_file("../outside.py"), "'..'"),
    (_file("a/../../outside.py"), "'..'"),
    (_link("escape", "../../etc"), "outside the project"),
    (_link("deep/escape", "../../x"), "outside the project"),
    (_link("abs", "/etc/passwd"), "absolute path /etc/passwd"),
    (_link("hard", "/etc/shadow", tarfile.LNKTYPE), "absolute path"),
])
def test_an_entry_that_could_reach_outside_the_tree_is_refused(tmp_path, entry, says):
    archive = _archive(tmp_path / "p.tar.gz", [(_file("ok.py"), b"1"), (entry, b"x" if entry.isfile() else None)])
    with pytest.raises(ProjectError, match="refused") as refused:
        safe_unpack(archive, tmp_path / "tree")
    assert says in str(refused.value) and entry.name in str(refused.value)
    assert not (tmp_path / "outside.py").exists()


def test_devices_and_pipes_are_refused():
    for kind in (tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE):
        info = tarfile.TarInfo("dev")
        info.type = kind
        assert unsafe_member(info) == "a device, pipe or other special file"
    assert unsafe_member(_link("ok", "sub/../other")) == ""


def test_a_link_chain_out_of_the_tree_is_caught_when_unpacked(tmp_path):
    """Each link alone stays inside; through the first, the second leads out: the data filter sees it."""
    entries = [(_link("a", "."), None), (_link("a/b", ".."), None)]
    assert [unsafe_member(info) for info, _ in entries] == ["", ""]  # the name check alone lets both pass
    archive = _archive(tmp_path / "p.tar.gz", entries)
    with pytest.raises(ProjectError):
        safe_unpack(archive, tmp_path / "tree")


def test_a_corrupt_archive_and_a_bomb_say_so(tmp_path):
    (tmp_path / "bad.tar.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(ProjectError, match="could not be unpacked"):
        safe_unpack(tmp_path / "bad.tar.gz", tmp_path / "tree1")
    archive = _archive(tmp_path / "big.tar.gz", [(_file("a"), b"x" * 600), (_file("b"), b"y" * 600)])
    with pytest.raises(ProjectError, match="unpacks to more than 1.0 kB"):
        safe_unpack(archive, tmp_path / "tree2", max_bytes=1000)


def test_the_job_gets_its_own_copy_and_keeps_what_it_already_has(tmp_path):
    tree, job = tmp_path / "tree", tmp_path / "job"
    (tree / "pkg").mkdir(parents=True)
    (tree / "train.py").write_text("project")
    (tree / "pkg" / "m.py").write_text("m")
    os.symlink("pkg", tree / "pkglink")
    (job / "output").mkdir(parents=True)
    (job / "train.py").write_text("downloaded script")
    copied, kept = copy_tree(tree, job)
    assert (copied, kept) == (2, ["train.py"])  # m.py and the link; the job's script wins
    assert (job / "train.py").read_text() == "downloaded script"
    assert os.readlink(job / "pkglink") == "pkg"
    (job / "pkg" / "m.py").write_text("changed by the job")
    assert (tree / "pkg" / "m.py").read_text() == "m"  # not a hard link: the cache is untouched
    assert (job / "pkg" / "m.py").stat().st_ino != (tree / "pkg" / "m.py").stat().st_ino


def test_input_names_become_upper_case_variables():
    assert variable("train") == "SIMPLEAI_INPUT_TRAIN"
    assert variable("Data_2") == "SIMPLEAI_INPUT_DATA_2"
    for bad in ("", "2data", "a-b", "x" * 33, "../x"):
        with pytest.raises(InputError):
            variable(bad)


def test_object_names_that_cannot_be_paths_are_refused():
    assert safe_relative("a/b.txt") == "a/b.txt"
    for bad in ("../x", "a//b", "/abs", "a/./b", "a/.."):
        with pytest.raises(InputError):
            safe_relative(bad)


def test_progress_lines_say_bytes_files_and_rate():
    assert format_progress("TRAIN", 5_000_000, 20_000_000, 1, 4, 2.0) == \
        "Input TRAIN: 5.0 MB of 20.0 MB (25%), 1 of 4 files, 2.5 MB/s"
    assert format_progress("X", 0, 0, 0, 0, 0.0) == "Input X: 0 bytes of 0 bytes, 0 of 0 files, 0 bytes/s"
    assert format_bytes(999) == "999 bytes" and format_bytes(1_500_000_000) == "1.5 GB"


def test_the_docker_runtime_mounts_each_input_read_only(tmp_path):
    tree = tmp_path / "inputs" / "tree"
    tree.mkdir(parents=True)
    (tree / "one.csv").write_text("x")
    spec = LaunchSpec(make_placement(), tmp_path / "work", tmp_path / "work" / "output", {},
                      inputs=(("train", tree), ("labels", tree / "one.csv")))
    mapping = places(spec)
    assert (tree, Path("/simpleai/inputs/TRAIN"), True) in [(a, Path(b), c) for a, b, c in mapping]
    assert (tree / "one.csv", Path("/simpleai/inputs/LABELS/one.csv"), True) in [(a, Path(b), c) for a, b, c in mapping]
    kwargs = build_run_kwargs(LaunchSpec(spec.placement, spec.workdir, spec.output_dir,
                                         {"SIMPLEAI_INPUT_TRAIN": str(tree), "SIMPLEAI_INPUT_LABELS": str(tree / "one.csv")},
                                         inputs=spec.inputs), False, user=JobIdentity(1900000001, 2000000001))
    assert kwargs["environment"]["SIMPLEAI_INPUT_TRAIN"] == "/simpleai/inputs/TRAIN"
    assert kwargs["environment"]["SIMPLEAI_INPUT_LABELS"] == "/simpleai/inputs/LABELS/one.csv"
    mounts = {m["Target"]: m for m in kwargs["mounts"]}
    assert mounts["/simpleai/inputs/TRAIN"]["Source"] == str(tree) and mounts["/simpleai/inputs/TRAIN"]["ReadOnly"]


def test_the_overlay_key_follows_tenant_requirements_and_local_wheels(tmp_path):
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "tiny-1.0-py3-none-any.whl").write_bytes(b"w")
    text = "--find-links wheels\n-f https://example.com/simple\ntiny==1.0\n"
    assert local_find_links(text, tmp_path) == [(tmp_path / "wheels").resolve()]
    assert local_find_links("--find-links=../../etc\n", tmp_path) == []  # outside the project: not its content
    key = overlay_key("u1", text, "base", "d1")
    assert key == overlay_key("u1", text, "base", "d1")
    assert len({key, overlay_key("u2", text, "base", "d1"), overlay_key("u1", text + "x\n", "base", "d1"),
                overlay_key("u1", text, "other", "d1"), overlay_key("u1", text, "base", "d2")}) == 5


def test_pip_errors_are_its_own_lines():
    lines = ["Looking in links: wheels", "ERROR: Could not find a version that satisfies the requirement nope==9",
             "ERROR: No matching distribution found for nope==9"]
    assert pip_error(lines) == ("ERROR: Could not find a version that satisfies the requirement nope==9 | "
                                "ERROR: No matching distribution found for nope==9")
    assert pip_error(["something", "last words"]) == "something | last words"
    conflict = ["ERROR: Cannot install torch==1.0 because these package versions have conflicting dependencies.", "",
                "The conflict is caused by:", "    The user requested torch==1.0",
                "    The user requested (constraint) torch==2.13.0", "", "To fix this you could try to:",
                "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/..."]
    assert pip_error(conflict) == ("ERROR: Cannot install torch==1.0 because these package versions have conflicting "
                                   "dependencies. | The conflict is caused by: The user requested torch==1.0; "
                                   "The user requested (constraint) torch==2.13.0")
