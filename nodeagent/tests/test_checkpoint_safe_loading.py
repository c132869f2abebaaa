"""Restoring never runs code from a checkpoint: only allow-listed globals are unpickled."""

from __future__ import annotations

import collections
import copy
import logging
import os
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from nodeagent.tests.checkpoint_scripts import support

support.vendor_on_path()
from concurrent_checkpoint import (  # noqa: E402
    CheckpointCorrupted,
    CheckpointEngine,
    ForbiddenGlobal,
    allow_globals,
    read_shard,
    safe_pickle,
)


@pytest.fixture(autouse=True)
def no_key_and_a_clean_allow_list(monkeypatch):
    """No signing key (this file is about loading, at home or on the platform alike) and no
    user-allowed globals leaking from one test into another."""
    monkeypatch.delenv("CHECKPOINT_SIGNING_KEY", raising=False)
    monkeypatch.setattr(safe_pickle, "_user_allowed", set())
    monkeypatch.setattr(safe_pickle, "_user_objects", [])


class RunsCommand:
    """What an attacker pickles: unpickling it would call os.system."""

    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@dataclass
class RunConfig:
    """A class of the job's own, saved inside its state."""

    name: str
    warmup: int


def shard_of(root, step: int):
    return next((root / "concurrent_checkpoint" / f"step-{step}").glob("*.shard"))


def test_a_structure_calling_os_system_is_refused_without_running_it(tmp_path, caplog):
    marker = tmp_path / "pwned"
    with CheckpointEngine(tmp_path / "out") as engine:
        engine.save(1, {"w": torch.ones(3)})
        engine.save(2, {"w": torch.zeros(3), "evil": RunsCommand(marker)})

    with pytest.raises(ForbiddenGlobal, match="system") as refused:
        read_shard(shard_of(tmp_path / "out", 2))
    with caplog.at_level(logging.ERROR, logger="concurrent_checkpoint"):
        resumed = CheckpointEngine(tmp_path / "out").load_latest()

    assert isinstance(refused.value, CheckpointCorrupted)
    assert not marker.exists()
    assert resumed.step == 1 and torch.equal(resumed.state["w"], torch.ones(3))
    assert "step 2 is unusable" in caplog.text and "system" in caplog.text


def test_saving_a_class_that_loading_would_refuse_is_warned_about_at_once(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="concurrent_checkpoint"), CheckpointEngine(tmp_path) as engine:
        engine.save(1, {"config": RunConfig("a", 1)})
        engine.save(2, {"config": RunConfig("b", 2)})

    warnings = [r.getMessage() for r in caplog.records if "RunConfig" in r.getMessage()]
    assert len(warnings) == 1 and "allow_globals" in warnings[0]


def test_a_class_of_the_jobs_own_loads_once_it_is_allowed(tmp_path):
    with CheckpointEngine(tmp_path) as engine:
        engine.save(1, {"config": RunConfig("run", 10), "w": torch.ones(2)})
    engine = CheckpointEngine(tmp_path)

    with pytest.raises(ForbiddenGlobal, match="RunConfig"):
        engine.read(engine.locate(1))
    allow_globals([RunConfig])
    loaded = engine.load_latest()

    assert loaded.state["config"] == RunConfig("run", 10)


def test_a_global_can_be_allowed_by_name(tmp_path):
    with CheckpointEngine(tmp_path) as engine:
        engine.save(1, {"config": RunConfig("run", 10)})

    allow_globals(f"{RunConfig.__module__}:{RunConfig.__qualname__}")

    assert CheckpointEngine(tmp_path).load_latest().state["config"].warmup == 10


def test_states_the_library_saves_load_under_the_allow_list(tmp_path):
    model, optimizer, scheduler = support.make_plain(seed=0)
    support.train_plain(model, optimizer, scheduler, 0, 2)
    schedulers = {
        "lambda": torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.9 ** s),
        "onecycle": torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=10),
        "cosine": torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=3),
        "plateau": torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer),
    }
    state = {
        "plain": support.plain_state(model, optimizer, scheduler, 2),
        "schedulers": {name: s.state_dict() for name, s in schedulers.items()},
        "scaler": torch.amp.GradScaler("cpu").state_dict(),
        "rng_generator": torch.Generator().manual_seed(3).get_state(),
        "numpy": {"array": np.arange(6, dtype=np.float32).reshape(2, 3), "scalar": np.float64(2.5),
                  "objects": np.array([1, "two"], dtype=object)},
        "python": {"ordered": collections.OrderedDict(a=1), "default": collections.defaultdict(list, b=[2]),
                   "set": {1, 2}, "frozen": frozenset({3}), "complex": 1 + 2j, "slice": slice(1, 5, 2),
                   "range": range(3), "bytes": b"\x00\x01", "bytearray": bytearray(b"ab"), "deque": collections.deque([1])},
        "torch_types": {"size": torch.Size([2, 3]), "dtype": torch.bfloat16, "device": torch.device("cpu"),
                        "layout": torch.sparse_coo, "memory_format": torch.channels_last},
    }
    expected = copy.deepcopy(state)
    with CheckpointEngine(tmp_path) as engine:
        engine.save(1, state)

    loaded = CheckpointEngine(tmp_path).load_latest().state

    support.assert_bitwise_equal(loaded["plain"], expected["plain"])
    assert loaded["schedulers"].keys() == expected["schedulers"].keys()
    assert loaded["scaler"] == expected["scaler"]
    assert torch.equal(loaded["rng_generator"], expected["rng_generator"])
    support.assert_bitwise_equal(loaded["numpy"]["array"], expected["numpy"]["array"])
    assert loaded["numpy"]["scalar"] == 2.5 and list(loaded["numpy"]["objects"]) == [1, "two"]
    assert loaded["python"] == expected["python"]
    assert loaded["torch_types"] == expected["torch_types"]


@pytest.mark.filterwarnings("ignore::UserWarning")  # CSR is "beta", quantized tensors "deprecated"
def test_sparse_quantized_and_meta_tensors_come_back_through_weights_only_loading(tmp_path):
    state = {
        "coo": torch.eye(4).to_sparse(),
        "csr": torch.eye(3).to_sparse_csr(),
        "quantized": torch.quantize_per_tensor(torch.linspace(-1, 1, 8), 0.1, 0, torch.qint8),
        "meta": torch.empty(5, 2, device="meta"),
    }
    with CheckpointEngine(tmp_path) as engine:
        engine.save(1, state)

    loaded = CheckpointEngine(tmp_path).load_latest().state

    assert torch.equal(loaded["coo"].to_dense(), torch.eye(4)) and loaded["coo"].is_sparse
    assert torch.equal(loaded["csr"].to_dense(), torch.eye(3))
    assert torch.equal(loaded["quantized"].int_repr(), state["quantized"].int_repr())
    assert loaded["meta"].is_meta and loaded["meta"].shape == (5, 2)
