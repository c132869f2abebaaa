"""Crash safety: a process killed mid-write leaves the previous checkpoint as the newest complete one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from nodeagent.tests.checkpoint_scripts import support

support.vendor_on_path()
from concurrent_checkpoint import CheckpointEngine, writer  # noqa: E402

SCRIPT = support.HERE / "crash_train.py"


def wait_for_line(process: subprocess.Popen, wanted: str, stderr: Path) -> list[str]:
    seen = []
    while line := process.stdout.readline():  # the script exits (EOF) if it never prints it
        seen.append(line.strip())
        if line.strip() == wanted:
            return seen
    process.kill()
    raise AssertionError(f"never printed {wanted!r}; got {seen}; stderr: {stderr.read_text()[-3000:]}")


@pytest.mark.slow
def test_a_process_killed_during_a_flush_resumes_from_the_previous_checkpoint(tmp_path):
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "w") as errors:
        process = subprocess.Popen([sys.executable, str(SCRIPT), str(tmp_path)], env=support.subprocess_env(),
                                   stdout=subprocess.PIPE, stderr=errors, text=True)
    wait_for_line(process, "DURABLE 3", stderr)
    wait_for_line(process, "FLUSHING 6", stderr)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    root = tmp_path / "concurrent_checkpoint"
    partial = list((root / ".staging" / "step-6").glob("*.partial"))

    resumed = CheckpointEngine(tmp_path).load_latest()

    assert process.returncode == -signal.SIGKILL
    assert partial, "the kill did not land during the flush of step 6"
    assert resumed.step == 3
    support.assert_bitwise_equal(resumed.state, torch.load(tmp_path / "expected-3.pt", weights_only=False))
    assert not (root / "step-6").exists() and not (root / ".staging" / "step-6").exists()


def test_a_checkpoint_committed_just_before_the_crash_is_not_lost(tmp_path):
    with CheckpointEngine(tmp_path) as engine:
        engine.save(1, {"w": torch.zeros(10)})
        engine.save(2, {"w": torch.ones(10)})
    root = tmp_path / "concurrent_checkpoint"
    # killed between writing MANIFEST.json and the rename out of .staging:
    os.replace(root / "step-2", root / ".staging" / "step-2")
    # and another checkpoint cut short at the same time:
    (root / ".staging" / "step-3").mkdir()
    (root / ".staging" / "step-3" / "rank-00000-of-00001.shard.partial").write_bytes(b"\0" * 100)

    engine = CheckpointEngine(tmp_path)

    assert engine.complete_steps() == [1, 2]
    assert torch.equal(engine.load_latest().state["w"], torch.ones(10))
    assert not (root / ".staging" / "step-3").exists()


def test_another_process_opening_the_directory_leaves_a_live_save_alone(tmp_path, monkeypatch):
    disk_ready = threading.Event()
    original = writer.pwrite_all
    monkeypatch.setattr(writer, "pwrite_all", lambda *args: (disk_ready.wait(), original(*args)))
    trainer_engine = CheckpointEngine(tmp_path, piece_mb=1)
    trainer_engine.save(5, {"w": torch.arange(300_000.0)})  # staged, not a byte written yet

    reader = CheckpointEngine(tmp_path)  # e.g. an evaluation script; it runs crash recovery
    disk_ready.set()
    trainer_engine.close()

    assert reader.complete_steps() == [5]
    assert torch.equal(reader.load_latest().state["w"], torch.arange(300_000.0))
