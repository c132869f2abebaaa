"""torchrun's exit-barrier noise becomes one explained line; everything else passes unchanged.

data/exit_barrier_noise.txt is what torch 2.13's torchrun printed on a worker node that
reached the exit barrier after the master had closed its TCPStore (captured from a real run).
"""

from __future__ import annotations

from pathlib import Path

from nodeagent.teardown_noise import MAX_HELD, TeardownNoiseFolder

NOISE = (Path(__file__).parent / "data" / "exit_barrier_noise.txt").read_text().splitlines()
ERROR = "Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?"


def run(lines: list[str], close: bool = True) -> list[str]:
    out: list[str] = []
    folder = TeardownNoiseFolder(out.append)
    for line in lines:
        folder.feed(line)
    if close:
        folder.close()
    return out


def test_the_exit_barrier_noise_is_folded_into_one_explained_line():
    out = run(["rank 1 step 12 loss 2.26", *NOISE])
    assert out[0] == "rank 1 step 12 loss 2.26"
    assert len(out) == 2
    assert out[1] == (
        "[INFO] torchrun finished on this node. The master node's torchrun had already closed its rendezvous store "
        "when this node reached the exit barrier: normal at the end of a multi-node run "
        f"({len(NOISE)} lines of PyTorch teardown messages folded)"
    )


def test_it_is_folded_as_soon_as_it_is_complete():
    assert len(run(NOISE, close=False)) == 1


def test_the_python_part_alone_is_folded_too():
    python_part = [line for line in NOISE if line.startswith("E1130")]
    out = run(python_part)
    assert len(out) == 1 and f"({len(python_part)} lines" in out[0]


def test_a_store_warning_that_is_not_the_barrier_is_shown_as_it_is():
    warning = [NOISE[0], *[line for line in NOISE if line.startswith("frame #")]]
    lines = [*warning, "Traceback (most recent call last):", "RuntimeError: the job really failed"]
    assert run(lines) == lines


def test_held_lines_are_released_in_order_when_the_output_ends_early():
    assert run(NOISE[:5]) == NOISE[:5]


def test_a_barrier_that_timed_out_is_not_hidden():
    timed_out = [*NOISE[:-1], NOISE[-1].replace(ERROR, "Timed out waiting on barrier on rank 1")]
    assert run(timed_out) == timed_out


def test_ordinary_output_passes_through_untouched():
    lines = ["", "epoch 1", "frame #3: is just a word here", "E1130 not a torch prefix", "done"]
    assert run(lines) == lines


def test_an_endless_run_of_stack_lines_is_not_held_forever():
    lines = [NOISE[0], *(f"frame #{i}: x" for i in range(MAX_HELD + 5))]
    out = run(lines, close=False)
    assert out == lines[: len(out)] and len(out) > MAX_HELD
