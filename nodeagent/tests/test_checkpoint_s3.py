"""Object storage: complete checkpoints are mirrored to S3 and a job on another node resumes from there."""

from __future__ import annotations

import shutil
import uuid

import pytest
import torch
from transformers import Trainer

from nodeagent.tests.checkpoint_scripts import support

support.vendor_on_path()
from concurrent_checkpoint import CheckpointEngine, ConfigError, TrainerCheckpointing  # noqa: E402


@pytest.fixture
def bucket_env(object_store, monkeypatch):
    """A fresh bucket, reached the way a job reaches it: through the environment."""
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    object_store.client().create_bucket(Bucket=bucket)
    for key, value in object_store.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("CHECKPOINT_S3_URL", f"s3://{bucket}/jobs/job-1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("CKPT_LAST_STEP", raising=False)
    return bucket


def keys(object_store, bucket: str) -> list[str]:
    listing = object_store.client().list_objects_v2(Bucket=bucket)
    return sorted(o["Key"] for o in listing.get("Contents", []))


def test_a_job_moved_to_another_node_resumes_from_the_mirror(tmp_path, object_store, bucket_env):
    node_a, node_b = tmp_path / "node-a", tmp_path / "node-b"
    big = torch.randn(18 * (1 << 20))  # 72 MB: uploaded in multipart
    with CheckpointEngine(node_a, keep_last=2) as engine:
        for step in (1, 2, 3):
            engine.save(step, {"w": big * step, "step": step})
    stored = keys(object_store, bucket_env)
    shutil.rmtree(node_a)  # the node is gone with its disk

    resumed = CheckpointEngine(node_b).load_latest()

    assert "jobs/job-1/step-3/MANIFEST.json" in stored and "jobs/job-1/step-2/MANIFEST.json" in stored
    assert not [k for k in stored if k.startswith("jobs/job-1/step-1/")]  # retention in S3 too
    assert resumed.step == 3 and resumed.source == "s3"
    assert torch.equal(resumed.state["w"], big * 3)


def test_the_trainer_resumes_from_the_mirror_when_the_output_dir_is_gone(tmp_path, bucket_env, monkeypatch):
    def trainer_for(output_dir, seed):
        model = support.tiny_llama(seed)
        trainer = Trainer(model=model, train_dataset=support.token_dataset(count=24),
                          args=support.training_args(output_dir, 6, 3))
        return model, trainer, TrainerCheckpointing(trainer, host_cache_size=0.1).engine

    model, trainer, engine = trainer_for(tmp_path / "first", 0)
    trainer.train()
    engine.close()
    expected = support.parameters_of(model)
    shutil.rmtree(tmp_path / "first")
    monkeypatch.setenv("CKPT_LAST_STEP", "3")

    model, trainer, engine = trainer_for(tmp_path / "second", 99)
    trainer.train(resume_from_checkpoint=True)  # steps 4 to 6 again, from what S3 holds of step 3
    engine.close()

    assert trainer.state.global_step == 6
    support.assert_bitwise_equal(support.parameters_of(model), expected)


def test_an_unreachable_bucket_stops_the_job_at_start_up(tmp_path, object_store, monkeypatch):
    for key, value in object_store.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("CHECKPOINT_S3_URL", "s3://no-such-bucket-here/x")

    with pytest.raises(ConfigError, match="no-such-bucket-here"):
        CheckpointEngine(tmp_path)
