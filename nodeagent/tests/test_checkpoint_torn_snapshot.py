"""What is written is the state at `save()` time, even while training goes on changing it."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from nodeagent.tests.checkpoint_scripts import support

support.vendor_on_path()
from concurrent_checkpoint import CheckpointEngine, CheckpointError, TornSnapshot, copier, writer  # noqa: E402


@pytest.fixture
def disk_gate(monkeypatch):
    """Nothing reaches the disk until the test sets the event: the write is certainly pending."""
    gate = threading.Event()
    original = writer.pwrite_all
    monkeypatch.setattr(writer, "pwrite_all", lambda *args: (gate.wait(), original(*args)))
    return gate


@pytest.fixture
def copy_gate(monkeypatch):
    """Lazy copies wait until the test sets the event: they are certainly not done yet."""
    gate = threading.Event()
    original = copier.copy_piece
    monkeypatch.setattr(copier, "copy_piece", lambda *args, **kwargs: (gate.wait(), original(*args, **kwargs)))
    return gate


def model_and_optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 256)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_parameters_changed_right_after_save_returns_do_not_reach_the_file(tmp_path, disk_gate):
    model, optimizer = model_and_optimizer()
    expected = support.parameters_of(model)
    expected_momentum = optimizer.state_dict()["state"][0]["momentum_buffer"].clone()
    engine = CheckpointEngine(tmp_path, piece_mb=1, lazy=False)

    engine.save(1, {"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    with torch.no_grad():  # training goes on while the checkpoint has not been written at all
        for parameter in model.parameters():
            parameter.add_(1.0)
        optimizer.state[model[0].weight]["momentum_buffer"].mul_(-3.0)
    disk_gate.set()
    engine.close()

    loaded = CheckpointEngine(tmp_path).load_latest().state
    support.assert_bitwise_equal(loaded["model"], expected)
    assert torch.equal(loaded["optimizer"]["state"][0]["momentum_buffer"], expected_momentum)


def test_lazy_copies_overlap_training_and_finish_before_the_optimizer_step(tmp_path, copy_gate):
    model, optimizer = model_and_optimizer()
    expected = support.parameters_of(model)
    engine = CheckpointEngine(tmp_path, lazy=True, piece_mb=1)

    engine.save(1, {"model": model.state_dict()})  # returns with no byte copied yet
    model(torch.randn(4, 256)).sum().backward()  # forward and backward overlap the copies
    stepping = threading.Thread(target=optimizer.step)  # changes the parameters: must wait
    stepping.start()
    stepping.join(timeout=0.5)
    step_waited = stepping.is_alive()
    copy_gate.set()
    stepping.join(timeout=30)
    engine.close()

    assert step_waited and not stepping.is_alive()
    assert engine.stats.lazy_wait_seconds >= 0.4
    support.assert_bitwise_equal(CheckpointEngine(tmp_path).load_latest().state["model"], expected)


def test_lazy_mode_discards_a_snapshot_changed_before_its_copy_finished(tmp_path, copy_gate):
    model, _ = model_and_optimizer()
    engine = CheckpointEngine(tmp_path, lazy=True, piece_mb=1)

    engine.save(1, {"model": model.state_dict()})
    with torch.no_grad():
        model[0].weight.add_(1.0)  # like BatchNorm statistics updated in the forward pass
    copy_gate.set()

    with pytest.raises(CheckpointError) as raised:
        engine.wait()
    engine.close()
    assert isinstance(raised.value.__cause__, TornSnapshot)
    assert CheckpointEngine(tmp_path).load_latest() is None
