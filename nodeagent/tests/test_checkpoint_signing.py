"""Checkpoints are trusted only from the job itself: signed manifests and SHA-256 per file.

The job's key comes from CHECKPOINT_SIGNING_KEY (the platform sets it per job). "Someone else"
is an engine with no key, or with another job's key, writing a step that is then copied under
the victim's checkpoint directory or object-storage prefix, as a tenant who could write there
would plant it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid

import pytest
import torch

from nodeagent.tests.checkpoint_scripts import support

support.vendor_on_path()
from concurrent_checkpoint import (  # noqa: E402
    CheckpointCorrupted,
    CheckpointEngine,
    ConfigError,
    UntrustedCheckpoint,
)

JOB_KEY = "6a" * 32
OTHER_JOBS_KEY = "5b" * 32


@pytest.fixture(autouse=True)
def job_environment(monkeypatch):
    """The victim job's key in the environment, as the platform puts it there."""
    monkeypatch.setenv("CHECKPOINT_SIGNING_KEY", JOB_KEY)


class RunsCommand:
    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def step_dir(output_dir, step: int):
    return output_dir / "concurrent_checkpoint" / f"step-{step}"


def genuine(output_dir, steps=(1, 2), **settings) -> None:
    with CheckpointEngine(output_dir, **settings) as engine:
        for step in steps:
            engine.save(step, {"w": torch.full((64,), float(step)), "step": step})


def planted(tmp_path, victim_dir, step: int, *, key: str | None, marker=None) -> None:
    """Someone else's step, written with `key` (None: unsigned), copied into the victim's directory."""
    attacker = tmp_path / f"attacker-{uuid.uuid4().hex[:6]}"
    state = {"w": torch.full((64,), -1.0), "step": step}
    if marker is not None:
        state["payload"] = RunsCommand(marker)
    with CheckpointEngine(attacker, signing_key=key or b"\x00" * 16) as engine:
        engine.save(step, state)
    if key is None:  # an unsigned manifest: the signature removed
        manifest = step_dir(attacker, step) / "MANIFEST.json"
        body = json.loads(manifest.read_text())
        del body["signature"]
        manifest.write_text(json.dumps(body))
    shutil.copytree(step_dir(attacker, step), step_dir(victim_dir, step))


@pytest.mark.parametrize("attacker_key", [None, OTHER_JOBS_KEY], ids=["unsigned", "another-jobs-key"])
def test_a_planted_checkpoint_is_never_loaded_and_the_resume_uses_the_newest_genuine_step(
        tmp_path, caplog, attacker_key):
    victim = tmp_path / "job"
    genuine(victim)
    marker = tmp_path / "pwned"
    planted(tmp_path, victim, 9, key=attacker_key, marker=marker)

    with caplog.at_level(logging.WARNING, logger="concurrent_checkpoint"):
        engine = CheckpointEngine(victim)
        steps = engine.complete_steps()
        resumed = engine.load_latest()

    assert steps == [1, 2] and resumed.step == 2 and torch.equal(resumed.state["w"], torch.full((64,), 2.0))
    assert not marker.exists()
    skipped = [r.getMessage() for r in caplog.records if "skipping step 9" in r.getMessage()]
    reason = "not signed" if attacker_key is None else "does not verify with this job's key"
    assert len(skipped) == 1 and reason in skipped[0]  # one line, however often the steps are listed
    with pytest.raises(UntrustedCheckpoint):
        engine.ref_from_dir(step_dir(victim, 9))  # the Trainer's and DeepSpeed's way in, too


def test_with_only_planted_steps_the_job_starts_fresh(tmp_path):
    victim = tmp_path / "job"
    planted(tmp_path, victim, 4, key=OTHER_JOBS_KEY)

    assert CheckpointEngine(victim).load_latest() is None


@pytest.mark.parametrize("where", ["tensor bytes", "structure", "footer"])
def test_a_tampered_shard_byte_is_refused_by_its_hash(tmp_path, where):
    genuine(tmp_path)
    shard = next(step_dir(tmp_path, 2).glob("*.shard"))
    data = bytearray(shard.read_bytes())
    footer_length = int.from_bytes(data[-16:-8], "little")
    position = {"tensor bytes": 10, "structure": len(data) - 16 - footer_length - 5,
                "footer": len(data) - 16 - footer_length + 2}[where]
    data[position] ^= 0x01
    shard.write_bytes(bytes(data))
    engine = CheckpointEngine(tmp_path)

    with pytest.raises(CheckpointCorrupted):
        engine.read(engine.locate(2))
    assert engine.load_latest().step == 1


def test_a_shard_swapped_for_another_of_the_same_size_is_refused(tmp_path):
    genuine(tmp_path)
    own = next(step_dir(tmp_path, 2).glob("*.shard"))
    shutil.copyfile(next(step_dir(tmp_path, 1).glob("*.shard")), own)  # a valid shard, another step's
    engine = CheckpointEngine(tmp_path)

    with pytest.raises(CheckpointCorrupted):
        engine.read(engine.locate(2))
    assert engine.load_latest().step == 1


def test_a_signed_manifest_edited_afterwards_is_refused(tmp_path):
    genuine(tmp_path)
    manifest = step_dir(tmp_path, 2) / "MANIFEST.json"
    body = json.loads(manifest.read_text())
    body["metadata"]["note"] = "edited"
    manifest.write_text(json.dumps(body))

    assert CheckpointEngine(tmp_path).complete_steps() == [1]


def test_a_genuine_step_renamed_to_a_newer_one_is_refused(tmp_path):
    genuine(tmp_path)
    shutil.copytree(step_dir(tmp_path, 1), step_dir(tmp_path, 7))  # a replay under another step

    assert CheckpointEngine(tmp_path).load_latest().step == 2


def test_a_changed_trainer_state_file_is_refused(tmp_path):
    with CheckpointEngine(tmp_path) as engine:
        engine.save(1, {"w": torch.ones(2)}, files={"trainer_state.json": b'{"global_step": 1}'})
    (step_dir(tmp_path, 1) / "trainer_state.json").write_bytes(b'{"global_step": 9}')

    with pytest.raises(CheckpointCorrupted, match="trainer_state.json"):
        CheckpointEngine(tmp_path).ref_from_dir(step_dir(tmp_path, 1))


def test_planted_steps_neither_push_out_the_jobs_own_nor_get_deleted(tmp_path):
    victim = tmp_path / "job"
    for step in (100, 101, 102):
        planted(tmp_path, victim, step, key=None)

    genuine(victim, steps=(1, 2, 3), keep_last=2)

    assert CheckpointEngine(victim).complete_steps() == [2, 3]
    assert all(step_dir(victim, s).is_dir() for s in (100, 101, 102))  # left alone, only ignored


def test_without_a_key_unsigned_steps_load_and_hashes_are_still_checked(tmp_path, monkeypatch):
    monkeypatch.delenv("CHECKPOINT_SIGNING_KEY")
    genuine(tmp_path)
    assert "signature" not in json.loads((step_dir(tmp_path, 2) / "MANIFEST.json").read_text())
    shard = next(step_dir(tmp_path, 2).glob("*.shard"))
    data = bytearray(shard.read_bytes())
    data[20] ^= 0x01
    shard.write_bytes(bytes(data))

    assert CheckpointEngine(tmp_path).load_latest().step == 1


def test_the_manifest_records_a_sha256_for_every_byte_of_every_file(tmp_path):
    import hashlib

    with CheckpointEngine(tmp_path, piece_mb=1) as engine:
        engine.save(1, {"big": torch.randn(3 << 18), "small": torch.ones(3)}, files={"notes.json": b"{}"})
    directory = step_dir(tmp_path, 1)
    manifest = json.loads((directory / "MANIFEST.json").read_text())

    for entry in manifest["files"]:
        data = (directory / entry["name"]).read_bytes()
        position = 0
        for length, digest in entry["sha256"]:
            assert hashlib.sha256(data[position:position + length]).hexdigest() == digest
            position += length
        assert position == len(data) == entry["bytes"]
    shard = next(e for e in manifest["files"] if e["kind"] == "shard")
    assert len(shard["sha256"]) > 3  # hashed per piece, as the writer threads wrote them
    assert manifest["signature"]["algorithm"] == "HMAC-SHA256"


def test_a_key_that_is_not_hex_stops_the_job_at_start_up(tmp_path, monkeypatch):
    monkeypatch.setenv("CHECKPOINT_SIGNING_KEY", "not-hex")

    with pytest.raises(ConfigError, match="CHECKPOINT_SIGNING_KEY"):
        CheckpointEngine(tmp_path)


# --- object storage --------------------------------------------------------------------------

@pytest.fixture
def bucket(object_store, monkeypatch):
    name = f"ckpt-{uuid.uuid4().hex[:12]}"
    object_store.client().create_bucket(Bucket=name)
    for key, value in object_store.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("CHECKPOINT_S3_URL", f"s3://{name}/jobs/7/checkpoints")
    return name


def upload_step(object_store, bucket: str, directory, step: int) -> None:
    client = object_store.client()
    for path in sorted(directory.iterdir(), key=lambda p: p.name == "MANIFEST.json"):  # manifest last
        client.upload_file(str(path), bucket, f"jobs/7/checkpoints/step-{step}/{path.name}")


def test_a_step_planted_in_the_bucket_is_skipped_and_the_resume_uses_the_newest_genuine_one(
        tmp_path, object_store, bucket, caplog, monkeypatch):
    genuine(tmp_path / "node-a")
    monkeypatch.delenv("CHECKPOINT_S3_URL")  # the attacker writes only its own disk, then uploads
    marker = tmp_path / "pwned"
    planted(tmp_path, tmp_path / "staging", 5, key=OTHER_JOBS_KEY, marker=marker)
    upload_step(object_store, bucket, step_dir(tmp_path / "staging", 5), 5)
    monkeypatch.setenv("CHECKPOINT_S3_URL", f"s3://{bucket}/jobs/7/checkpoints")
    shutil.rmtree(tmp_path / "node-a")  # the job moved to another node

    with caplog.at_level(logging.WARNING, logger="concurrent_checkpoint"):
        engine = CheckpointEngine(tmp_path / "node-b")
        listed = engine.complete_steps()
        resumed = engine.load_latest()

    assert listed == [1, 2] and resumed.step == 2 and resumed.source == "s3"
    assert torch.equal(resumed.state["w"], torch.full((64,), 2.0)) and not marker.exists()
    assert len([r for r in caplog.records if "skipping step 5" in r.getMessage()]) == 1


def test_a_fetched_step_keeps_its_signature_and_a_tampered_object_is_refused(tmp_path, object_store, bucket):
    genuine(tmp_path / "node-a")
    client = object_store.client()
    key = "jobs/7/checkpoints/step-2/rank-00000-of-00001.shard"
    data = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    data[7] ^= 0x01
    client.put_object(Bucket=bucket, Key=key, Body=bytes(data))
    shutil.rmtree(tmp_path / "node-a")

    engine = CheckpointEngine(tmp_path / "node-b")
    resumed = engine.load_latest()

    assert resumed.step == 1 and resumed.source == "s3"
    fetched = tmp_path / "node-b" / "concurrent_checkpoint" / ".remote" / "step-1"
    assert engine.ref_from_dir(fetched).step == 1  # stored as received: it still verifies


# --- the seed's path: the Hugging Face Trainer through DecoratedCheckpointing -----------------

def test_the_trainer_resumes_from_the_newest_genuine_step_past_a_planted_one(tmp_path, monkeypatch):
    from datastates.llm import DecoratedCheckpointing
    from transformers import Trainer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("CKPT_LAST_STEP", raising=False)

    def trainer_for(seed: int):
        model = support.tiny_llama(seed)
        trainer = Trainer(model=model, train_dataset=support.token_dataset(count=24),
                          args=support.training_args(tmp_path / "out", 6, 3))
        engine = DecoratedCheckpointing({"host_cache_size": 0.1, "trainer": trainer}).engine
        return model, trainer, engine

    model, trainer, engine = trainer_for(0)
    trainer.train()
    engine.close()
    expected = support.parameters_of(model)
    marker = tmp_path / "pwned"
    planted(tmp_path, tmp_path / "out", 9, key=OTHER_JOBS_KEY, marker=marker)

    model, trainer, engine = trainer_for(99)
    trainer.train(resume_from_checkpoint=True)
    engine.close()

    assert trainer.state.global_step == 6 and not marker.exists()
    support.assert_bitwise_equal(support.parameters_of(model), expected)  # step 6's weights, loaded
