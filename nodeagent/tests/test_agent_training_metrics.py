"""Training metrics found in output lines: Trainer log dicts and the SIMPLEAI_METRIC line."""

from __future__ import annotations

import asyncio

import pytest

from nodeagent.trainmetrics import TrainingMetrics, parse_line


@pytest.mark.parametrize(("line", "expected"), [
    ("{'loss': 0.5312, 'grad_norm': 1.234, 'learning_rate': 5e-05, 'epoch': 0.1}",
     {"TrainingLoss": 0.5312, "TrainingGradNorm": 1.234, "TrainingLearningRate": 5e-05, "TrainingEpoch": 0.1}),
    # transformers ≥ 4.5x prints the numbers as strings
    ("{'loss': '0.5312', 'grad_norm': '1.234', 'learning_rate': '5e-05', 'epoch': '0.1'}",
     {"TrainingLoss": 0.5312, "TrainingGradNorm": 1.234, "TrainingLearningRate": 5e-05, "TrainingEpoch": 0.1}),
    ("{'eval_loss': np.float64(0.25), 'eval_runtime': 3.2, 'epoch': 1.0}", {"TrainingEvalLoss": 0.25, "TrainingEpoch": 1.0}),
    (" 12%|█▏        | 120/1000 [00:10<01:15]{'loss': 0.4, 'epoch': 0.12}", {"TrainingLoss": 0.4, "TrainingEpoch": 0.12}),
    ('SIMPLEAI_METRIC {"step": 12, "loss": 0.4, "throughput": 123.4, "lr": 0.001}',
     {"TrainingStep": 12.0, "TrainingLoss": 0.4, "TrainingThroughput": 123.4, "TrainingLearningRate": 0.001}),
    ('[default0]:SIMPLEAI_METRIC {"loss": 1.5, "my_metric": 3}', {"TrainingLoss": 1.5}),  # unknown keys ignored
])
def test_metric_lines_are_recognised(line, expected):
    assert parse_line(line) == expected


@pytest.mark.parametrize("line", [
    "rank 0 step 12 loss 0.40000",  # prose: a log line, not a metric line
    "{'loss': __import__('os').system('touch /tmp/pwned')}",  # never evaluated
    "SIMPLEAI_METRIC {not json}",
    'SIMPLEAI_METRIC {"loss": NaN, "step": Infinity}',
    'SIMPLEAI_METRIC {"loss": true}',
    'SIMPLEAI_METRIC ["loss", 1]',
    "{'loss': 0.1" + ", 'x': 0" * 2000 + "}",  # longer than any Trainer line
    "{" * 500 + "'loss': 1" + "}" * 500,
])
def test_other_lines_are_not_metrics(line, tmp_path):
    assert parse_line(line) == {}
    assert not (tmp_path / "pwned").exists()


class FakeOutbox:
    def __init__(self) -> None:
        self.batches: list[list] = []

    def metrics(self, samples: list) -> None:
        self.batches.append(samples)


def test_lines_become_one_batch_with_the_job_and_stream_and_distinct_times():
    outbox = FakeOutbox()
    logged: list[str] = []

    async def scenario():
        training = TrainingMetrics(outbox, job_id=7, stream="worker-1")  # type: ignore[arg-type]
        sink = training.tap(logged.append)
        for step in range(3):
            sink(f'SIMPLEAI_METRIC {{"step": {step}, "loss": {1 - step / 10}}}')
        sink("an ordinary line")
        training.flush()  # the runner flushes before its exit report

    asyncio.run(scenario())
    assert len(logged) == 4  # every line still reaches the log
    [batch] = outbox.batches
    assert {tuple(sorted(s[3].items())) for s in batch} == {(("job", 7), ("stream", "worker-1"))}
    losses = [(s[1], s[2]) for s in batch if s[0] == "TrainingLoss"]
    assert [v for _, v in losses] == [1.0, 0.9, 0.8]
    assert len({t for t, _ in losses}) == 3  # one sample per series and instant: times never repeat
