"""Trains, checkpoints every 3 steps, and gets killed (SIGKILL, by the test) in the middle of a flush.

    PYTHONPATH=<vendor> python crash_train.py OUTPUT_DIR

Writes `expected-3.pt` (a torch.save of the state it checkpointed) once step 3 is durable, then
makes the flush of step 6 hang in its first write and prints `FLUSHING 6` while it is under way.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import support
import torch
from concurrent_checkpoint import CheckpointEngine, writer

output = Path(sys.argv[1])
slow = {"on": False, "announced": False}
original_pwrite = writer.pwrite_all
print_lock = threading.Lock()


def say(line: str) -> None:
    """One whole line per write: the writer thread and the main thread both report."""
    with print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    if slow["on"]:
        if not slow["announced"]:
            slow["announced"] = True
            say(f"FLUSHING {slow['step']}")
        time.sleep(30)  # a very slow disk: the flush is still going when the test kills us
    original_pwrite(fd, data, offset)


writer.pwrite_all = pwrite_all
model, optimizer, scheduler = support.make_plain(seed=0, width=512)
torch.manual_seed(1)
engine = CheckpointEngine(output, host_cache_size=0.05, piece_mb=1)


def on_step(step: int) -> None:
    if step % 3:
        return
    state = support.plain_state(model, optimizer, scheduler, step)
    if step == 6:
        slow.update(on=True, step=step)
    engine.save(step, state)
    if step == 3:
        engine.wait()
        torch.save(support.plain_state(model, optimizer, scheduler, step), output / "expected-3.pt")
        say("DURABLE 3")


support.train_plain(model, optimizer, scheduler, 0, 7, on_step=on_step)
say("TRAINING DONE")
time.sleep(60)  # the test kills us long before
