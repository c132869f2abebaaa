"""Settings: arguments win over the environment; bad values stop the job at start-up, loudly."""

from __future__ import annotations

import pytest
from transformers import Trainer

from nodeagent.tests.checkpoint_scripts import support

support.vendor_on_path()
from concurrent_checkpoint import CheckpointConfig, CheckpointEngine, ConfigError, S3Config  # noqa: E402
from datastates.llm import DecoratedCheckpointing  # noqa: E402


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("CHECKPOINT_S3_URL", "CHECKPOINT_KEEP_LAST", "CHECKPOINT_HOST_CACHE_GB",
                 "CHECKPOINT_PARSER_THREADS", "S3_ENDPOINT_URL", "S3_ACCESS_KEY", "S3_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(("name", "value"), [("CHECKPOINT_KEEP_LAST", "0"), ("CHECKPOINT_KEEP_LAST", "three"),
                                             ("CHECKPOINT_PARSER_THREADS", "0"),
                                             ("CHECKPOINT_HOST_CACHE_GB", "lots")])
def test_a_bad_environment_value_is_an_error_naming_the_variable(tmp_path, monkeypatch, name, value):
    monkeypatch.setenv(name, value)

    with pytest.raises(ConfigError, match=name):
        CheckpointEngine(tmp_path)


def test_arguments_win_over_the_environment(monkeypatch):
    monkeypatch.setenv("CHECKPOINT_KEEP_LAST", "7")
    monkeypatch.setenv("CHECKPOINT_HOST_CACHE_GB", "3")

    config = CheckpointConfig.resolve(keep_last=2)

    assert (config.keep_last, config.host_cache_size) == (2, 3.0)


def test_s3_settings_come_from_the_environment_with_secrets_from_files(tmp_path, monkeypatch):
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t\n")
    monkeypatch.setenv("CHECKPOINT_S3_URL", "s3://bucket/jobs/42")
    monkeypatch.setenv("S3_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.setenv("S3_ACCESS_KEY", "key")
    monkeypatch.setenv("S3_SECRET_KEY_FILE", str(secret))

    s3 = CheckpointConfig.resolve().s3

    assert s3 == S3Config(bucket="bucket", prefix="jobs/42", endpoint_url="http://127.0.0.1:9000",
                          access_key="key", secret_key="s3cr3t")
    assert "s3cr3t" not in repr(s3)


def test_a_malformed_s3_url_is_rejected():
    with pytest.raises(ConfigError, match="s3://bucket/prefix"):
        CheckpointConfig.resolve(s3_url="https://bucket/prefix")


def test_a_misspelt_runtime_config_key_is_an_error(tmp_path):
    trainer = Trainer(model=support.tiny_llama(0), args=support.training_args(tmp_path, 2, 1))

    with pytest.raises(ConfigError, match="host_cache_szie"):
        DecoratedCheckpointing(runtime_config={"host_cache_szie": 50, "trainer": trainer})


def test_the_host_cache_is_capped_by_what_the_checkpoint_needs(tmp_path):
    """The seed asks for 50 GB; a small model must not pin (or touch) 50 GB of host memory."""
    import torch

    with CheckpointEngine(tmp_path, host_cache_size=50) as engine:
        engine.save(1, {"w": torch.zeros(1 << 20)})
        capacity = engine._cache.capacity

    assert 8 << 20 <= capacity <= 16 << 20  # two 4 MB checkpoints in flight, not 50 GB
