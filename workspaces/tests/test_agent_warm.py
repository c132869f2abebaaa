"""The node agent's warm pool (nodeagent.warm) through its real Runner: a cold placement keeps
its prepared environment, a warm one reuses it and skips every preparation step."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from nodeagent import warm
from nodeagent.runner import Runner, RunnerContext
from nodeagent.runtimes.process import ProcessRuntime
from nodeagent.tests.agent_support import make_placement, process_runtime

SCRIPT = "s3://scripts/train.py"


class Outbox:
    def __init__(self) -> None:
        self.lines: list[tuple[int, str]] = []

    def logs(self, job_id: int, attempt: int, stream: str, lines: list[list[Any]]) -> None:
        self.lines.extend((job_id, line[2]) for line in lines)

    def attempt(self, placement, state, **fields) -> None:
        pass

    def of(self, job_id: int) -> list[str]:
        return [text for job, text in self.lines if job == job_id]


class Storage:
    """Object storage with one script whose content (and ETag) a test may change."""

    def __init__(self) -> None:
        self.body, self.downloads = b"print('trained')\n", 0
        self.client = self

    def head_object(self, Bucket: str, Key: str) -> dict:  # boto3's argument names
        return {"ETag": f'"{hash(self.body)}"'}

    def download(self, url: str, directory: Path) -> tuple[Path, int]:
        self.downloads += 1
        target = directory / url.rsplit("/", 1)[-1]
        target.write_bytes(self.body)
        return target, len(self.body)


def run(work_dir: Path, storage: Storage, outbox: Outbox, runtime: ProcessRuntime | None = None, **placement) -> Path:
    ctx = RunnerContext(
        node_name="node-a", work_dir=work_dir, runtime=runtime or ProcessRuntime(real_gpus=False), outbox=outbox,  # type: ignore[arg-type]
        storage=lambda placement: storage, default_grace=1.0,
    )
    placement.setdefault("command", "cat train.py; echo edited > train.py")
    runner = Runner(make_placement(script_url=SCRIPT, **placement), ctx)
    asyncio.run(runner.run())
    return runner.paths.workdir


def hint(reuse: int | None = None, keep: int = 600) -> dict:
    return {"warm_pool": {"owner": 3, "keep_alive_seconds": keep, "reuse_from_job": reuse}}


def test_a_warm_placement_reuses_the_environment_and_skips_preparation(tmp_path):
    storage, outbox = Storage(), Outbox()
    run(tmp_path, storage, outbox, job_id=1, job_name="cold-job", command="cat train.py", **hint())
    cold = outbox.of(1)
    assert any(line.startswith("[INFO] Downloading training script s3://scripts/train.py") for line in cold)
    assert any(line.startswith("[INFO] Image ") for line in cold)

    workdir = run(tmp_path, storage, outbox, job_id=2, job_name="warm-job", **hint(reuse=1))
    warm_lines = outbox.of(2)
    assert "[INFO] Warm start: environment reused from job cold-job (#1); already on this node: the training script train.py" in warm_lines
    assert not any("Downloading" in line or line.startswith("[INFO] Image ") or "Checkpoint library" in line for line in warm_lines)
    assert storage.downloads == 1
    assert "print('trained')" in warm_lines  # the kept script is there …
    assert (workdir / "train.py").read_text() == "edited\n"  # … and the command rewrote it in place:
    # the kept file (a hard link) changed with it, so the next job prepares from scratch
    run(tmp_path, storage, outbox, job_id=3, job_name="third", **hint(reuse=2))
    assert "[INFO] A job changed the files job warm-job prepared on this node; preparing from scratch" in outbox.of(3)
    assert "print('trained')" in outbox.of(3) and storage.downloads == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")
def test_in_the_sandbox_a_job_reads_the_kept_files_but_cannot_change_the_copy_the_next_job_starts_from(tmp_path):
    """Each placement runs as a user of its own (nodeagent.sandbox): the kept files (hard links)
    stay the agent's, readable; a job may replace its own link, never the kept copy."""
    storage, outbox, sandboxed = Storage(), Outbox(), process_runtime()
    run(tmp_path, storage, outbox, sandboxed, job_id=1, job_name="cold-job", command="cat train.py", **hint())
    rewrite = "echo edited > train.py || echo refused; rm -f train.py; echo mine > train.py; cat train.py"
    run(tmp_path, storage, outbox, sandboxed, job_id=2, job_name="warm-job", command=f"cat train.py; {rewrite}", **hint(reuse=1))
    second = outbox.of(2)
    assert any(line.startswith("[INFO] Warm start: ") for line in second)
    assert "print('trained')" in second and "refused" in second and "mine" in second
    run(tmp_path, storage, outbox, sandboxed, job_id=3, job_name="third", command="cat train.py", **hint(reuse=2))
    assert any(line.startswith("[INFO] Warm start: ") for line in outbox.of(3)) and "print('trained')" in outbox.of(3)
    assert storage.downloads == 1


def test_a_kept_environment_is_reused_again_and_again_while_untouched(tmp_path):
    storage, outbox = Storage(), Outbox()
    for job in range(1, 5):
        run(tmp_path, storage, outbox, job_id=job, job_name=f"job-{job}", command="cat train.py", **hint(reuse=job - 1 or None))
    assert storage.downloads == 1
    assert "[INFO] Warm start: environment reused from job job-3 (#3); already on this node: the training script train.py" in outbox.of(4)


def test_a_warm_start_claims_only_what_the_job_has_on_the_node():
    meta = {"job_name": "cold", "job_id": 4, "files": {"train.py": [9, 1], "data/a.csv": [3, 1], "data/b.csv": [3, 1]}}
    line = warm.warm_start_line(meta, make_placement(script_url=SCRIPT, image="team/train:1"), uses_image=True)
    assert line == ("Warm start: environment reused from job cold (#4); already on this node: the image team/train:1, "
                    "the training script train.py and 2 other files it prepared")
    # the process runtime does not use the image; a job without a script or files has nothing kept
    bare = warm.warm_start_line({"job_name": "cold", "job_id": 4, "files": {}}, make_placement(), uses_image=False)
    assert bare == "Warm start: environment reused from job cold (#4); this job has nothing to download (no training script or data)"
    assert "image" not in warm.warm_start_line(meta, make_placement(script_url=SCRIPT), uses_image=False)


def test_a_script_changed_in_object_storage_is_downloaded_again(tmp_path):
    storage, outbox = Storage(), Outbox()
    run(tmp_path, storage, outbox, job_id=1, job_name="cold-job", **hint())
    storage.body = b"print('fixed')\n"
    run(tmp_path, storage, outbox, job_id=2, job_name="second", **hint(reuse=1))
    lines = outbox.of(2)
    assert "[INFO] The training script changed in object storage since job cold-job prepared this node; preparing from scratch" in lines
    assert "print('fixed')" in lines and storage.downloads == 2


def test_without_a_kept_environment_a_warm_placement_prepares_as_usual(tmp_path):
    storage, outbox = Storage(), Outbox()
    run(tmp_path, storage, outbox, job_id=2, job_name="second", **hint(reuse=1))
    assert "[INFO] No warm environment is kept on this node for this job (its keep-alive ended here); preparing it" in outbox.of(2)
    assert storage.downloads == 1


def test_without_a_warm_pool_hint_nothing_is_kept(tmp_path):
    run(tmp_path, Storage(), Outbox(), job_id=1)
    assert not (tmp_path / "warm").exists()


def test_another_users_environment_is_never_reused(tmp_path):
    storage, outbox = Storage(), Outbox()
    run(tmp_path, storage, outbox, job_id=1, **hint())
    other = {"warm_pool": {"owner": 4, "keep_alive_seconds": 600, "reuse_from_job": 1}}
    run(tmp_path, storage, outbox, job_id=2, **other)
    assert storage.downloads == 2
    assert len(list((tmp_path / "warm").iterdir())) == 2  # one key per owner


def test_a_kept_environment_is_deleted_after_its_keep_alive(tmp_path):
    run(tmp_path, Storage(), Outbox(), job_id=1, **hint(keep=60))
    [entry] = list((tmp_path / "warm").iterdir())
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["job_id"] == 1 and meta["ended_at"] is not None
    assert warm.sweep(tmp_path, now=time.time() + 60) == []  # within keep-alive + grace
    assert warm.sweep(tmp_path, now=time.time() + 60 + warm.EXPIRY_GRACE + 1) == [entry.name]
    assert not entry.exists()


def test_a_copy_renamed_by_a_placement_ending_meanwhile_does_not_break_the_sweep(tmp_path, monkeypatch):
    """Seen in CI: two jobs of one key end on a node at once; one renames its half-written copy
    into place while the other's sweep has listed it but not yet read its time."""
    run(tmp_path, Storage(), Outbox(), job_id=1, **hint(keep=0))
    [kept] = list((tmp_path / "warm").iterdir())
    copy = kept.with_name(f"{kept.name}.2-1-master.tmp")
    copy.mkdir()
    read_meta = warm._read_meta

    def renamed_meanwhile(entry: Path) -> dict | None:
        if entry == copy:
            copy.rename(tmp_path / "warm" / "elsewhere")  # what the ending placement's os.replace does
            return None
        return read_meta(entry)

    monkeypatch.setattr(warm, "_read_meta", renamed_meanwhile)
    assert warm.sweep(tmp_path, now=time.time() + warm.EXPIRY_GRACE + 1) == [kept.name]  # the expired one still goes


def test_a_kept_environment_swept_while_being_checked_is_prepared_from_scratch(tmp_path, monkeypatch):
    storage, outbox = Storage(), Outbox()
    run(tmp_path, storage, outbox, job_id=1, job_name="cold-job", command="cat train.py", **hint())

    def swept_meanwhile(files: Path) -> dict:
        raise FileNotFoundError(2, "No such file or directory", str(files / "train.py"))

    monkeypatch.setattr(warm, "_signature", swept_meanwhile)
    run(tmp_path, storage, outbox, job_id=2, job_name="second", command="cat train.py", **hint(reuse=1))
    lines = outbox.of(2)
    assert "[INFO] The warm environment kept on this node could not be used ([Errno 2] No such file or directory: " \
        f"'{tmp_path}/warm/" in "\n".join(lines)
    assert any(line.endswith("train.py'); preparing from scratch") for line in lines)
    assert "print('trained')" in lines and storage.downloads == 2
