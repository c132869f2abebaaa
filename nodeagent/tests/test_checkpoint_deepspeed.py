"""DeepSpeed integration, against a stand-in with DeepSpeedEngine's method signatures.

DeepSpeed itself is not installed here (it compiles ops and pins its own torch), so this proves the
wrapper's contract (signatures, what is saved, what load restores and returns), not DeepSpeed.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from nodeagent.tests.checkpoint_scripts import support

support.vendor_on_path()
from concurrent_checkpoint import CheckpointEngine, wrap_deepspeed_engine  # noqa: E402
from concurrent_checkpoint.deepspeed_integration import collect_state  # noqa: E402


class StandInEngine:
    """The parts of deepspeed.runtime.engine.DeepSpeedEngine that checkpointing touches."""

    def __init__(self, seed: int, optimizer_factory=None) -> None:
        torch.manual_seed(seed)
        self.module = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
        make = optimizer_factory or (lambda params: torch.optim.AdamW(params, lr=1e-2))
        self.optimizer = make(self.module.parameters())
        base = getattr(self.optimizer, "inner", self.optimizer)
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(base, lambda s: 1 / (1 + s))
        self.global_steps = self.global_samples = self.skipped_steps = 0
        self.global_rank, self.world_size, self.dp_world_size = 0, 1, 1

    def __call__(self, x):
        return self.module(x)

    def backward(self, loss):
        loss.backward()

    def step(self):
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.lr_scheduler.step()
        self.global_steps += 1
        self.global_samples += 4

    def save_checkpoint(self, save_dir, tag=None, client_state={}, save_latest=True,  # noqa: B006
                        exclude_frozen_parameters=False):
        raise AssertionError("DeepSpeed's own save_checkpoint must not run")

    def load_checkpoint(self, load_dir, tag=None, load_module_strict=True, load_optimizer_states=True,
                        load_lr_scheduler_states=True, load_module_only=False, custom_load_fn=None):
        raise AssertionError("DeepSpeed's own load_checkpoint must not run")


class ZeroStyleOptimizer:
    """ZeRO optimizers take the list of every data-parallel rank's state in load_state_dict."""

    def __init__(self, params) -> None:
        self.inner = torch.optim.AdamW(params, lr=1e-2)
        self.received = None

    def step(self):
        self.inner.step()

    def zero_grad(self):
        self.inner.zero_grad()

    def state_dict(self):
        return self.inner.state_dict()

    def load_state_dict(self, state_dict_list, load_optimizer_states=True, load_from_fp32_weights=False,
                        checkpoint_folder=None, load_serial=None):
        self.received = state_dict_list
        self.inner.load_state_dict(state_dict_list[0])


def train(engine: StandInEngine, steps: int) -> list[float]:
    losses = []
    for _ in range(steps):
        x = torch.randn(4, 8)
        loss = (engine(x) - x[:, :2]).pow(2).mean()
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    return losses


def test_the_wrapped_methods_keep_deepspeeds_signatures():
    engine = StandInEngine(0)
    before = {n: inspect.signature(getattr(engine, n)).parameters.keys() for n in ("save_checkpoint", "load_checkpoint")}

    wrap_deepspeed_engine(engine)

    for name, parameters in before.items():
        assert list(inspect.signature(getattr(engine, name)).parameters) == list(parameters)


def test_save_then_load_resumes_the_engine_bit_for_bit(tmp_path):
    reference = StandInEngine(0)
    torch.manual_seed(1)
    expected = train(reference, 8)

    engine = StandInEngine(0)
    wrapper = wrap_deepspeed_engine(engine)
    torch.manual_seed(1)
    first = train(engine, 4)
    assert engine.save_checkpoint(str(tmp_path), client_state={"epoch": 2, "seen": [1, 2]}) is True
    rng = torch.get_rng_state()
    wrapper.close()

    resumed = StandInEngine(seed=77)
    resumed_wrapper = wrap_deepspeed_engine(resumed)
    path, client_state = resumed.load_checkpoint(str(tmp_path))
    torch.set_rng_state(rng)
    rest = train(resumed, 4)
    resumed_wrapper.close()

    assert path.endswith("concurrent_checkpoint/step-4") and client_state == {"epoch": 2, "seen": [1, 2]}
    assert first + rest == expected
    support.assert_bitwise_equal(resumed.module.state_dict(), reference.module.state_dict())
    assert (resumed.global_steps, resumed.global_samples) == (8, 32)


def test_tags_pick_a_checkpoint_and_a_missing_one_returns_none(tmp_path):
    engine = StandInEngine(0)
    wrapper = wrap_deepspeed_engine(engine)
    train(engine, 2)
    engine.save_checkpoint(str(tmp_path))
    weights_at_2 = support.parameters_of(engine.module)
    train(engine, 2)
    engine.save_checkpoint(str(tmp_path), tag="before-eval")
    wrapper.wait()

    assert engine.load_checkpoint(str(tmp_path), tag="global_step2")[0].endswith("step-2")
    support.assert_bitwise_equal(support.parameters_of(engine.module), weights_at_2)
    assert engine.global_steps == 2
    assert engine.load_checkpoint(str(tmp_path), tag="before-eval")[0].endswith("step-4")
    assert engine.load_checkpoint(str(tmp_path), tag="global_step99") == (None, None)
    assert (tmp_path / "concurrent_checkpoint" / "step-2" / "global_step2").is_file()  # what transformers globs
    wrapper.close()


def test_zero_optimizers_get_the_per_rank_list_they_expect(tmp_path):
    engine = StandInEngine(0, optimizer_factory=ZeroStyleOptimizer)
    wrapper = wrap_deepspeed_engine(engine)
    train(engine, 3)
    engine.save_checkpoint(str(tmp_path))
    expected = engine.optimizer.state_dict()
    wrapper.close()

    resumed = StandInEngine(5, optimizer_factory=ZeroStyleOptimizer)
    wrap_deepspeed_engine(resumed).load_checkpoint(str(tmp_path))

    assert isinstance(resumed.optimizer.received, list) and len(resumed.optimizer.received) == 1
    support.assert_bitwise_equal(resumed.optimizer.state_dict(), expected)


def test_load_module_only_leaves_optimizer_and_counters_alone(tmp_path):
    engine = StandInEngine(0)
    wrapper = wrap_deepspeed_engine(engine)
    train(engine, 3)
    engine.save_checkpoint(str(tmp_path))
    wrapper.close()

    fresh = StandInEngine(9)
    untouched = fresh.optimizer.state_dict()
    wrap_deepspeed_engine(fresh).load_checkpoint(str(tmp_path), load_module_only=True)

    support.assert_bitwise_equal(fresh.module.state_dict(), engine.module.state_dict())
    assert fresh.global_steps == 0 and fresh.optimizer.state_dict() == untouched


def test_a_trainer_style_checkpoint_loads_through_transformers_deepspeed_resume(tmp_path):
    """The Trainer+DeepSpeed path: the Trainer saves the engine's state nested under "deepspeed"
    with a `global_stepN` marker, and transformers' own deepspeed_load_checkpoint (real code, not
    a copy) must find the directory and reach the wrapped load_checkpoint."""
    from transformers.integrations.deepspeed import deepspeed_load_checkpoint

    engine = StandInEngine(0)
    train(engine, 3)
    with CheckpointEngine(tmp_path) as checkpoints:
        checkpoints.save(3, {"deepspeed": collect_state(engine), "rng": {}},
                         files={"trainer_state.json": b"{}", "global_step3": b"x"})
        step_dir = checkpoints.locate(3).path

    resumed = StandInEngine(11)
    wrapper = wrap_deepspeed_engine(resumed)
    deepspeed_load_checkpoint(resumed, str(step_dir))
    wrapper.close()

    support.assert_bitwise_equal(resumed.module.state_dict(), engine.module.state_dict())
    support.assert_bitwise_equal(resumed.optimizer.state_dict(), engine.optimizer.state_dict())
    assert resumed.global_steps == 3
