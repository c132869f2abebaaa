"""On-disk layout: step directories with a manifest, the newest N kept, one shard per rank."""

from __future__ import annotations

import json
import time

import torch

from nodeagent.tests.checkpoint_scripts import support

support.vendor_on_path()
from concurrent_checkpoint import CheckpointEngine  # noqa: E402


def test_each_checkpoint_is_a_step_directory_with_a_manifest(tmp_path):
    with CheckpointEngine(tmp_path) as engine:
        engine.save(7, {"w": torch.ones(1000)}, files={"notes.json": b'{"a": 1}'})
    step_dir = tmp_path / "concurrent_checkpoint" / "step-7"

    manifest = json.loads((step_dir / "MANIFEST.json").read_text())

    assert manifest["step"] == 7 and manifest["world_size"] == 1 and manifest["time"].endswith("+00:00")
    shard, notes = manifest["files"]
    assert (shard["name"], shard["rank"], shard["kind"]) == ("rank-00000-of-00001.shard", 0, "shard")
    assert shard["bytes"] == (step_dir / shard["name"]).stat().st_size and shard["raw_bytes"] >= 4000
    assert notes["name"] == "notes.json" and (step_dir / "notes.json").read_bytes() == b'{"a": 1}'
    assert all(isinstance(f["crc32"], int) for f in manifest["files"])


def test_only_the_newest_n_checkpoints_are_kept(tmp_path):
    with CheckpointEngine(tmp_path, keep_last=2) as engine:
        for step in range(1, 6):
            engine.save(step, {"step": step})

    assert CheckpointEngine(tmp_path).complete_steps() == [4, 5]


def test_a_checkpoint_is_complete_only_when_every_rank_wrote_its_shard(tmp_path):
    rank0 = CheckpointEngine(tmp_path, rank=0, world_size=2)
    rank1 = CheckpointEngine(tmp_path, rank=1, world_size=2)
    rank0.save(1, {"rank": 0, "w": torch.zeros(10)})
    time.sleep(0.5)
    visible_before_rank1 = CheckpointEngine(tmp_path, rank=0, world_size=2).complete_steps()

    rank1.save(1, {"rank": 1, "w": torch.ones(10)})
    rank1.wait()
    rank0.wait()

    assert visible_before_rank1 == []
    assert rank0.load_latest().state["rank"] == 0
    assert torch.equal(rank1.load_latest().state["w"], torch.ones(10))  # each rank reads its own shard
    manifest = rank0.locate(1).manifest
    assert sorted(f.name for f in manifest.files) == ["rank-00000-of-00002.shard", "rank-00001-of-00002.shard"]
    rank0.close()
    rank1.close()


def test_resuming_before_newer_checkpoints_replaces_that_abandoned_timeline(tmp_path):
    with CheckpointEngine(tmp_path) as old_run:
        for step in (3, 6, 9):
            old_run.save(step, {"step": step, "run": "old"})

    with CheckpointEngine(tmp_path) as new_run:  # resumed from step 3 (CKPT_LAST_STEP=3, say)
        new_run.save(6, {"step": 6, "run": "new"})

    engine = CheckpointEngine(tmp_path)
    assert engine.complete_steps() == [3, 6]  # the old step 9 must not win a later resume
    assert engine.load_latest().state == {"step": 6, "run": "new"}
