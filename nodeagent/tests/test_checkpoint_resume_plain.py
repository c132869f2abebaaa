"""Plain PyTorch: a run stopped at step k and resumed equals an uninterrupted run, bit for bit."""

from __future__ import annotations

import torch

from nodeagent.tests.checkpoint_scripts import support

support.vendor_on_path()
from concurrent_checkpoint import CheckpointEngine  # noqa: E402

TOTAL = 12
EVERY = 3


def uninterrupted() -> tuple[list[float], dict]:
    model, optimizer, scheduler = support.make_plain(seed=0)
    torch.manual_seed(1)
    losses = support.train_plain(model, optimizer, scheduler, 0, TOTAL)
    return losses, support.parameters_of(model)


def test_a_run_stopped_at_step_7_and_resumed_equals_an_uninterrupted_run(tmp_path):
    expected_losses, expected_params = uninterrupted()

    model, optimizer, scheduler = support.make_plain(seed=0)
    torch.manual_seed(1)
    engine = CheckpointEngine(tmp_path, host_cache_size=0.05)

    def checkpoint(step: int) -> None:
        if step % EVERY == 0:
            engine.save(step, support.plain_state(model, optimizer, scheduler, step))

    first_losses = support.train_plain(model, optimizer, scheduler, 0, 7, on_step=checkpoint)
    engine.close()  # the job stops after step 7; step 6 is the newest checkpoint

    # a new process: other initial weights and RNG, everything must come from the checkpoint
    model, optimizer, scheduler = support.make_plain(seed=123)
    torch.manual_seed(999)
    resumed = CheckpointEngine(tmp_path).load_latest()
    start = support.restore_plain(resumed.state, model, optimizer, scheduler)
    rest = support.train_plain(model, optimizer, scheduler, start, TOTAL)

    assert start == 6
    assert first_losses[:6] + rest == expected_losses
    support.assert_bitwise_equal(support.parameters_of(model), expected_params)


def test_checkpointing_does_not_change_the_training_itself(tmp_path):
    expected_losses, expected_params = uninterrupted()
    model, optimizer, scheduler = support.make_plain(seed=0)
    torch.manual_seed(1)

    with CheckpointEngine(tmp_path, host_cache_size=0.05) as engine:
        losses = support.train_plain(
            model, optimizer, scheduler, 0, TOTAL,
            on_step=lambda s: engine.save(s, support.plain_state(model, optimizer, scheduler, s)))

    assert losses == expected_losses
    support.assert_bitwise_equal(support.parameters_of(model), expected_params)
