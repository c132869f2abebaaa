"""A checkpoint gives back exactly what was saved: every tensor bit for bit, every Python object."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch

from nodeagent.tests.checkpoint_scripts import support

support.vendor_on_path()
from concurrent_checkpoint import (  # noqa: E402
    CheckpointCorrupted,
    CheckpointEngine,
    capture_rng_state,
    restore_rng_state,
)


def trained_state(steps: int = 3) -> tuple[dict, tuple]:
    model, optimizer, scheduler = support.make_plain(seed=0)
    support.train_plain(model, optimizer, scheduler, 0, steps)
    return support.plain_state(model, optimizer, scheduler, steps), (model, optimizer, scheduler)


def test_it_restores_parameters_buffers_optimizer_scheduler_rng_and_step(tmp_path):
    state, _ = trained_state()
    expected = copy.deepcopy(state)
    with CheckpointEngine(tmp_path, host_cache_size=0.05) as engine:
        engine.save(3, state)

    loaded = CheckpointEngine(tmp_path).load_latest()

    assert loaded is not None and loaded.step == 3
    support.assert_bitwise_equal(loaded.state, expected)
    assert "net.1.running_mean" in loaded.state["model"]  # buffers, not just parameters
    assert loaded.state["optimizer"]["state"][0]["exp_avg_sq"].abs().sum() > 0


def test_restored_training_objects_equal_the_originals(tmp_path):
    state, (model, optimizer, scheduler) = trained_state()
    with CheckpointEngine(tmp_path) as engine:
        engine.save(3, state)
    fresh_model, fresh_optimizer, fresh_scheduler = support.make_plain(seed=42)

    step = support.restore_plain(CheckpointEngine(tmp_path).load_latest().state,
                                 fresh_model, fresh_optimizer, fresh_scheduler)

    assert step == 3
    support.assert_bitwise_equal(fresh_model.state_dict(), model.state_dict())
    support.assert_bitwise_equal(fresh_optimizer.state_dict(), optimizer.state_dict())
    assert fresh_scheduler.state_dict() == scheduler.state_dict()


def test_restored_rng_states_draw_the_same_numbers(tmp_path):
    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    with CheckpointEngine(tmp_path) as engine:
        engine.save(1, {"rng": capture_rng_state()})
    expected = (torch.rand(4), random.random(), np.random.rand(3))

    torch.manual_seed(99)
    random.seed(99)
    np.random.seed(99)
    restore_rng_state(CheckpointEngine(tmp_path).load_latest().state["rng"])

    actual = (torch.rand(4), random.random(), np.random.rand(3))
    assert torch.equal(actual[0], expected[0]) and actual[1] == expected[1]
    assert np.array_equal(actual[2], expected[2])


def test_it_keeps_every_dtype_shape_and_odd_layout(tmp_path):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    state = {
        "bf16": torch.randn(5, 3).to(torch.bfloat16),
        "fp16": torch.tensor([float("nan"), -0.0, 65504.0], dtype=torch.float16),
        "int8": torch.tensor([-128, 0, 127], dtype=torch.int8),
        "int64": torch.tensor(2**62),
        "bool": torch.tensor([True, False, True]),
        "complex": torch.randn(3, dtype=torch.complex64),
        "empty": torch.empty(0, 7),
        "transposed": base.t(),  # not contiguous
        "slice": base[1:3, ::2],
        "nested": [{"a": (1, "two", 3.0)}, None, {1, 2}],
        "param": torch.nn.Parameter(torch.ones(2)),
    }
    expected = copy.deepcopy(state)
    with CheckpointEngine(tmp_path) as engine:
        engine.save(1, state)

    loaded = CheckpointEngine(tmp_path).load_latest().state

    support.assert_bitwise_equal(loaded, expected)
    assert isinstance(loaded["param"], torch.nn.Parameter)


def test_tied_tensors_are_stored_once_and_come_back_tied(tmp_path):
    shared = torch.randn(256, 256)
    with CheckpointEngine(tmp_path) as engine:
        engine.save(1, {"embed": shared, "lm_head": shared})

    loaded = CheckpointEngine(tmp_path).load_latest()

    assert loaded.state["embed"] is loaded.state["lm_head"]
    assert loaded.manifest.total_bytes < 1.5 * shared.numel() * 4


def test_a_damaged_shard_is_rejected_and_the_previous_checkpoint_used(tmp_path):
    with CheckpointEngine(tmp_path) as engine:
        engine.save(1, {"w": torch.zeros(1000)})
        engine.save(2, {"w": torch.ones(1000)})
    shard = next((tmp_path / "concurrent_checkpoint" / "step-2").glob("*.shard"))
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF  # one flipped bit-pattern inside the tensor bytes
    shard.write_bytes(bytes(data))
    engine = CheckpointEngine(tmp_path)

    with pytest.raises(CheckpointCorrupted):
        engine.read(engine.locate(2))
    loaded = engine.load_latest()

    assert loaded.step == 1 and torch.equal(loaded.state["w"], torch.zeros(1000))
