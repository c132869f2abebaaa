"""The seed's script shape runs unchanged with only PYTHONPATH=<vendor dir>, and resumes after a kill."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import torch

from nodeagent.tests.checkpoint_scripts import support

SCRIPT = support.HERE / "seed_train.py"


def start(output_dir, cwd, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(SCRIPT)], cwd=cwd, text=True,
                            env=support.subprocess_env(OUTPUT_DIR=str(output_dir), **env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(process: subprocess.Popen) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=240)
    return process.returncode, stderr


@pytest.mark.slow
def test_the_seed_script_survives_a_preemption_and_resumes_bit_for_bit(tmp_path):
    job, reference = tmp_path / "job", tmp_path / "reference"
    # the platform's first attempt (killed at step 5) and, beside it, an uninterrupted run that
    # the platform started with CKPT_LAST_STEP=-1 on an empty output directory
    preempted = start(job, tmp_path, PREEMPT_AT_STEP="5")
    uninterrupted = start(reference, tmp_path, CKPT_LAST_STEP="-1")
    preempted_code, _ = finish(preempted)
    reference_code, reference_log = finish(uninterrupted)

    resumed_code, resumed_log = finish(start(job, tmp_path, CKPT_LAST_STEP="3"))

    assert preempted_code == -signal.SIGKILL
    assert reference_code == 0, reference_log[-3000:]
    assert "[Concurrent Checkpoint] No Checkpoint found with step: -1" in reference_log
    assert resumed_code == 0, resumed_log[-3000:]
    assert "No Checkpoint found" not in resumed_log
    resumed = torch.load(job / "result.pt", weights_only=False)
    expected = torch.load(reference / "result.pt", weights_only=False)
    assert resumed["global_step"] == expected["global_step"] == 8
    support.assert_bitwise_equal(resumed["params"], expected["params"])
    assert resumed["project_modules"] == []  # nothing but the vendor directory was imported
    assert sorted(p.name for p in (job / "concurrent_checkpoint").glob("step-*")) == ["step-3", "step-6", "step-8"]
