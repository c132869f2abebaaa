"""Training metrics found in a job's output lines: loss, learning rate, throughput, step, epoch.

Two forms are recognised on stdout/stderr (the line still goes to the log as well):

1. The Hugging Face Trainer's log dicts, a Python dict repr, e.g.
   `{'loss': 0.53, 'grad_norm': 1.2, 'learning_rate': 5e-05, 'epoch': 0.1}` (recent
   transformers print the numbers as strings, `{'loss': '0.53', ...}`: both are read).
2. One line of JSON after the marker `SIMPLEAI_METRIC`, which any script can print:
   `SIMPLEAI_METRIC {"step": 12, "loss": 0.4, "learning_rate": 0.0001, "throughput": 123.4}`
   (the marker may follow a prefix such as torchrun's `[default0]:`).

Known keys (others are ignored): loss, eval_loss, learning_rate (or lr), grad_norm,
throughput (samples/s), step, epoch. Values must be finite numbers.
"""

from __future__ import annotations

import ast
import asyncio
import json
import math
import re
import time
from typing import Any

from .logstream import Outbox

MARKER = "SIMPLEAI_METRIC"
MAX_LINE = 4096  # longer lines are not metric lines (and literal_eval must stay cheap)
FLUSH_SECONDS = 1.0
MAX_BATCH = 500

TRAINING_LOSS = "TrainingLoss"
TRAINING_EVAL_LOSS = "TrainingEvalLoss"
TRAINING_LEARNING_RATE = "TrainingLearningRate"
TRAINING_GRAD_NORM = "TrainingGradNorm"
TRAINING_THROUGHPUT = "TrainingThroughput"
TRAINING_STEP = "TrainingStep"
TRAINING_EPOCH = "TrainingEpoch"
KEYS: dict[str, str] = {
    "loss": TRAINING_LOSS, "eval_loss": TRAINING_EVAL_LOSS, "learning_rate": TRAINING_LEARNING_RATE,
    "lr": TRAINING_LEARNING_RATE, "grad_norm": TRAINING_GRAD_NORM, "throughput": TRAINING_THROUGHPUT,
    "step": TRAINING_STEP, "epoch": TRAINING_EPOCH,
}
TRAINING_METRICS = tuple(dict.fromkeys(KEYS.values()))

# numpy 2 prints np.float64(0.5) inside dict reprs; literal_eval needs the bare number
_NUMPY_SCALAR = re.compile(r"np\.(?:float|int)\d*\(([^()]*)\)")


def parse_line(text: str) -> dict[str, float]:
    """{metric name: value} found in one output line; {} for an ordinary line."""
    if len(text) > MAX_LINE:
        return {}
    marker = text.find(MARKER)
    if marker >= 0:
        try:
            found = json.loads(text[marker + len(MARKER):])
        except ValueError:
            return {}
    elif "{'" in text and text.rstrip().endswith("}"):
        found = _literal_dict(text[text.index("{'"):].rstrip())
    else:
        return {}
    return _known(found) if isinstance(found, dict) else {}


def _literal_dict(text: str) -> Any:
    try:
        # literal_eval evaluates literals only (no names, calls or attributes): safe on any text
        return ast.literal_eval(_NUMPY_SCALAR.sub(r"\1", text))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _known(found: dict[Any, Any]) -> dict[str, float]:
    values: dict[str, float] = {}
    for key, raw in found.items():
        name = KEYS.get(key) if isinstance(key, str) else None
        if name is None or isinstance(raw, bool):
            continue
        try:
            value = float(raw)
        except (TypeError, ValueError, OverflowError):
            continue
        if math.isfinite(value):
            values[name] = value
    return values


class TrainingMetrics:
    """Watches the output lines of one placement and ships what it finds as `metrics` batches.

    Samples carry the dimensions job and stream (the node role), like the job's log stream,
    so a job's loss curve continues across failovers. Timestamps are the time a line was read,
    made unique per stream (the console stores one sample per series and instant).
    """

    def __init__(self, outbox: Outbox, job_id: int, stream: str) -> None:
        self.outbox = outbox
        self.dimensions = {"job": job_id, "stream": stream}
        self._buffer: list[list[Any]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._last_us = 0

    def line(self, text: str) -> None:
        values = parse_line(text)
        if not values:
            return
        us = max(int(time.time() * 1e6), self._last_us + 1)
        self._last_us = us
        self._buffer.extend([name, us / 1e6, value, self.dimensions] for name, value in values.items())
        if len(self._buffer) >= MAX_BATCH:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(FLUSH_SECONDS, self.flush)

    def tap(self, sink: Any) -> Any:
        """A line sink that hands each line to `sink` (the log) and then looks for metrics."""

        def both(text: str) -> None:
            sink(text)
            self.line(text)

        return both

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._buffer:
            samples, self._buffer = self._buffer, []
            self.outbox.metrics(samples)
