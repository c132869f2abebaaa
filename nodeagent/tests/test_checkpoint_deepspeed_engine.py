"""The DeepSpeed wrapper on a real DeepSpeedEngine (0.18.9, two ranks on CPU over gloo), as
`deepspeed --num_gpus=2` launches it in the DeepSpeed training environment.

ZeRO stages 0 and 3 (stages 1 and 2 fail in DeepSpeed's own all-gather on CPU with torch 2.13:
"Output 0 of Split is a view and is being modified inplace"). The stand-in tests in
test_checkpoint_deepspeed.py cover the signatures; the e2e failover test resumes a ZeRO-3 job
with CKPT_LAST_STEP from object storage.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess

import pytest

from jobs.tests.e2e.environments import PrintLog, node_cache, seeded_specs
from nodeagent.environment import LAUNCHERS_DIR

from .checkpoint_scripts.support import HERE, VENDOR

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def deepspeed_bin():
    """bin/ of the seeded DeepSpeed environment (built into the machine's cache when missing)."""
    spec = next(spec for spec in seeded_specs() if spec["framework"] == "deepspeed")
    return asyncio.run(node_cache().prepare(spec, PrintLog())).bin_dir


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("zero", [0, 3])
@pytest.mark.duration(35)
def test_a_real_deepspeed_engine_resumes_bit_for_bit(zero, deepspeed_bin, tmp_path):
    env = {**os.environ, "PATH": f"{LAUNCHERS_DIR}:{deepspeed_bin}:{os.environ['PATH']}", "NNODES": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "DS_ACCELERATOR": "cpu",
           "PYTHONPATH": str(VENDOR), "OMP_NUM_THREADS": "1",
           "TORCH_EXTENSIONS_DIR": str(tmp_path / "jit")}
    result = subprocess.run(
        ["deepspeed", "--num_gpus=2", str(HERE / "deepspeed_resume.py"), "--zero", str(zero), "--out", str(tmp_path / "out")],
        env=env, capture_output=True, text=True, timeout=300,
    )
    line = next((line for line in result.stdout.splitlines() if line.startswith("RESULT ")), None)
    assert line is not None, result.stdout[-3000:] + result.stderr[-3000:]
    record = json.loads(line[len("RESULT "):])
    assert record["world"] == 2 and record["global_steps"] == 12
    assert record["restored"] == record["at_step_8"]  # every rank's weights and optimizer state, bit for bit
    assert record["resumed"] == record["original"]  # every rank's losses of steps 9..12 (floats compared exactly)
    assert record["resumed_digests"] == record["original_digests"]  # and the same state after step 12
    if zero == 3:  # each rank's digest is of its own partition
        assert len(set(record["at_step_8"])) == 2
    assert record["client_state"] == {"data_step": 8}
    assert record["path"].endswith("concurrent_checkpoint/step-8")
    assert [name for name in record["shards"] if name.endswith(".shard")] == ["rank-00000-of-00002.shard", "rank-00001-of-00002.shard"]
    # the CPU collective op came built with the environment: the job compiled nothing when it started
    assert not (tmp_path / "jit").exists()
