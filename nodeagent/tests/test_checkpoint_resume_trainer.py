"""Hugging Face Trainer: its checkpoints go through the engine and a resumed run is bit-identical."""

from __future__ import annotations

import contextlib
import json
import logging

import pytest
from transformers import Trainer, TrainerCallback

from nodeagent.tests.checkpoint_scripts import support

support.vendor_on_path()
from concurrent_checkpoint import TrainerCheckpointing  # noqa: E402
from datastates.llm import DecoratedCheckpointing  # noqa: E402

MAX_STEPS = 10
SAVE_STEPS = 3  # 24 rows, batch 4: 6 steps per epoch, so the run crosses an epoch boundary


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("CKPT_LAST_STEP", raising=False)


class Preempted(Exception):
    pass


class PreemptAt(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise Preempted(f"stopped after step {self.step}")


def run(output_dir, *, seed: int = 0, concurrent: bool = True, preempt_at: int | None = None,
        resume: bool = False, **trainer_args):
    model = support.tiny_llama(seed)
    losses = support.record_losses(model)
    trainer = Trainer(model=model, train_dataset=support.token_dataset(count=24),
                      args=support.training_args(output_dir, MAX_STEPS, SAVE_STEPS, **trainer_args))
    integration = TrainerCheckpointing(trainer, host_cache_size=0.1) if concurrent else None
    if preempt_at is not None:
        trainer.add_callback(PreemptAt(preempt_at))
    with contextlib.suppress(Preempted):
        trainer.train(resume_from_checkpoint=resume)
    if integration is not None:
        integration.engine.close()
    return losses, support.parameters_of(model), trainer


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run with the Trainer's own checkpointing: losses and final weights."""
    losses, params, _ = run(tmp_path_factory.mktemp("reference"), concurrent=False)
    return losses, params


def test_a_run_preempted_at_step_7_resumes_bit_for_bit(tmp_path, reference):
    expected_losses, expected_params = reference
    first, _, _ = run(tmp_path, preempt_at=7)

    rest, params, trainer = run(tmp_path, seed=99, resume=True)

    assert len(rest) == MAX_STEPS - 6  # resumed from step 6, the newest complete checkpoint
    assert first[:6] + rest == expected_losses
    support.assert_bitwise_equal(params, expected_params)
    assert trainer.state.global_step == MAX_STEPS


def test_ckpt_last_step_chooses_the_checkpoint_to_resume_from(tmp_path, reference, monkeypatch):
    expected_losses, expected_params = reference
    run(tmp_path, preempt_at=9)  # checkpoints at 3, 6 and 9
    monkeypatch.setenv("CKPT_LAST_STEP", "3")

    rest, params, _ = run(tmp_path, seed=99, resume=True)

    assert rest == expected_losses[3:]  # resumed mid-epoch from step 3, not from the newest (9)
    support.assert_bitwise_equal(params, expected_params)


def test_the_trainer_writes_concurrent_checkpoints_instead_of_its_own(tmp_path):
    _, _, trainer = run(tmp_path)
    root = tmp_path / "concurrent_checkpoint"

    assert not list(tmp_path.glob("checkpoint-*"))
    assert sorted(p.name for p in root.glob("step-*")) == ["step-10", "step-6", "step-9"]
    state = json.loads((root / "step-9" / "trainer_state.json").read_text())
    assert state["global_step"] == 9 and state["max_steps"] == MAX_STEPS
    trainer.save_model(str(tmp_path / "final"))  # the user's own saves are untouched
    assert (tmp_path / "final" / "model.safetensors").is_file()


def test_with_nothing_to_resume_it_logs_the_seed_message_and_starts_fresh(tmp_path, reference, caplog):
    model = support.tiny_llama(0)
    trainer = Trainer(model=model, train_dataset=support.token_dataset(count=24),
                      args=support.training_args(tmp_path, MAX_STEPS, SAVE_STEPS))
    engine = DecoratedCheckpointing(runtime_config={"host_cache_size": 50, "parser_threads": 1,
                                                    "pin_host_cache": True, "trainer": trainer}, rank=-1)

    with caplog.at_level(logging.ERROR, logger="datastates.llm.decorator"):
        trainer.train(resume_from_checkpoint=True)
    engine.engine.close()

    records = [r for r in caplog.records if r.name == "datastates.llm.decorator" and r.levelno == logging.ERROR]
    assert [r.getMessage() for r in records] == ["[Concurrent Checkpoint] No Checkpoint found with step: -1"]
    support.assert_bitwise_equal(support.parameters_of(model), reference[1])


def test_load_best_model_at_end_reads_the_best_concurrent_checkpoint(tmp_path):
    model = support.tiny_llama(0)
    args = support.training_args(tmp_path, MAX_STEPS, SAVE_STEPS, eval_strategy="steps",
                                 eval_steps=SAVE_STEPS, load_best_model_at_end=True,
                                 metric_for_best_model="loss", greater_is_better=False, save_total_limit=1)
    trainer = Trainer(model=model, args=args, train_dataset=support.token_dataset(count=24),
                      eval_dataset=support.token_dataset(count=8, seed=5))
    engine = TrainerCheckpointing(trainer, host_cache_size=0.1).engine

    trainer.train()
    best_step = trainer.state.best_global_step

    assert best_step != MAX_STEPS  # otherwise the test could not tell the best from the last
    assert trainer.state.best_model_checkpoint == str(engine.root / f"step-{best_step}")
    support.assert_bitwise_equal(support.parameters_of(model), engine.read(engine.locate(best_step))["model"])
    engine.close()


def test_without_concurrent_checkpoints_it_resumes_from_the_trainers_own(tmp_path, reference):
    expected_losses, expected_params = reference
    run(tmp_path, concurrent=False, preempt_at=7)  # an earlier run without the library
    assert (tmp_path / "checkpoint-6").is_dir()

    rest, params, _ = run(tmp_path, seed=99, resume=True)

    assert rest == expected_losses[6:]
    support.assert_bitwise_equal(params, expected_params)
