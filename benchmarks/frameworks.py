"""Training environments and DeepSpeed checkpoints, side by side.

    .venv/bin/python -m benchmarks.frameworks           # full run (~8 minutes on an idle 2-core machine)
    .venv/bin/python -m benchmarks.frameworks --quick   # one repeat of each (~3 minutes)

1. Environment preparation, first time vs cached (nodeagent.envcache, as an agent does it during
   `Creating`): a fresh cache directory; the seeded PyTorch environment (torch layer + venv + pip),
   then the DeepSpeed one (venv + pip over the same layer), then both again (cached). pip's own
   download cache is left as it is (printed: warm or cold), so "first time" is the build, not the
   network.
2. Checkpoint stall under DeepSpeed: a DeepSpeedEngine (CPU, gloo, `deepspeed --num_gpus=2`, ZeRO
   stage 0 and 3) trains an MLP and checkpoints every K steps, with DeepSpeed's own
   `save_checkpoint` and with `wrap_deepspeed_engine` (concurrent checkpointing). Each run is a
   fresh launch, the order of the modes rotates between repeats; per mode: the stall of each
   checkpoint call (median, p95), the median time of the other steps, the training time and the
   time until every checkpoint is durable. Figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._stack import percentile
from console.services.ports import free_port
from jobs.tests.e2e.environments import PrintLog, cache_dir, seeded_specs
from nodeagent.envcache import EnvironmentCache
from nodeagent.environment import LAUNCHERS_DIR, VENDOR_DIR

WORKER = Path(__file__).resolve().parent / "deepspeed_checkpoint_worker.py"


class QuietLog(PrintLog):
    def info(self, text: str) -> None:
        if not text.startswith("  "):  # pip's progress lines
            super().info(text)


def pip_cache_state() -> str:
    result = subprocess.run([sys.executable, "-m", "pip", "cache", "info"], capture_output=True, text=True)
    sizes = {key: line.split(":", 1)[1].strip() for line in result.stdout.splitlines()
             for key in ("Package index page cache size", "Locally built wheels size") if line.startswith(key)}
    return (f"pip's download cache: {sizes.get('Package index page cache size', '?')}, "
            f"its built-wheel cache: {sizes.get('Locally built wheels size', '?')}")


def environments(rounds: int) -> None:
    print(f"\n== 1. Environment preparation: first time vs cached ({pip_cache_state()}) ==")
    specs = {spec["name"]: spec for spec in seeded_specs()}
    rows = []
    for round_number in range(rounds):
        root = Path(tempfile.mkdtemp(prefix="simpleai-envbench-"))
        try:
            cache = EnvironmentCache(root, cpu_node=True)
            for label, name in (("first time (torch layer + venv + pip)", "pytorch-2.13.0"),
                                ("first time (venv + pip, layer there)", "deepspeed-0.18.9"),
                                ("cached", "pytorch-2.13.0"), ("cached", "deepspeed-0.18.9")):
                started = time.perf_counter()
                prepared = asyncio.run(cache.prepare(specs[name], QuietLog()))
                rows.append((round_number, name, label, time.perf_counter() - started, prepared.cached))
            size = subprocess.run(["du", "-sh", str(root / "envs"), str(root / "layers")], capture_output=True, text=True).stdout
        finally:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\n{'environment':<18} {'preparation':<40} {'median':>12}")
    by_key: dict[tuple[str, str], list[float]] = {}
    for _, name, label, seconds, _ in rows:
        by_key.setdefault((name, label), []).append(seconds)
    for (name, label), values in by_key.items():
        median = statistics.median(values)
        print(f"{name:<18} {label:<40} {f'{median:.1f} s' if median >= 1 else f'{median * 1000:.2f} ms':>12}")
    for name in specs:
        first = [v for (n, label), vs in by_key.items() if n == name and label.startswith("first") for v in vs]
        cached = [v for (n, label), vs in by_key.items() if n == name and label == "cached" for v in vs]
        print(f"{name}: first time {statistics.median(first):.1f} s, cached {statistics.median(cached) * 1000:.2f} ms "
              "(reading the entry's record: nothing is installed or copied)")
    print("disk:", " ".join(size.split()))


def run_worker(env_bin: Path, mode: str, zero: int, steps: int, every: int, width: int) -> dict:
    out = Path(tempfile.mkdtemp(prefix="simpleai-dsbench-"))
    env = {**os.environ, "PATH": f"{LAUNCHERS_DIR}:{env_bin}:{os.environ['PATH']}", "NNODES": "1", "NODE_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "DS_ACCELERATOR": "cpu",
           "PYTHONPATH": str(VENDOR_DIR), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("VIRTUAL_ENV", None)
    try:
        result = subprocess.run(
            ["deepspeed", "--num_gpus=2", str(WORKER), "--mode", mode, "--zero", str(zero), "--steps", str(steps),
             "--every", str(every), "--width", str(width), "--out", str(out)],
            env=env, capture_output=True, text=True, timeout=900,
        )
        line = next((line for line in result.stdout.splitlines() if line.startswith("RESULT ")), None)
        if line is None:
            raise RuntimeError(f"{mode} zero {zero} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        return json.loads(line[len("RESULT "):])
    finally:
        shutil.rmtree(out, ignore_errors=True)


def deepspeed_checkpoints(repeats: int, steps: int, every: int, width: int) -> None:
    deepspeed_spec = next(spec for spec in seeded_specs() if spec["framework"] == "deepspeed")
    prepared = asyncio.run(EnvironmentCache(cache_dir(), cpu_node=True).prepare(deepspeed_spec, QuietLog()))
    print("\n== 2. Checkpoint stall under DeepSpeed: its own save_checkpoint vs concurrent checkpointing ==")
    print(f"deepspeed --num_gpus=2 (2 ranks, CPU, gloo), MLP width {width}, {steps} steps, a checkpoint every {every}; "
          f"{repeats} repeat(s), modes rotated; load average {os.getloadavg()[0]:.1f}")
    for zero in (0, 3):
        results: dict[str, list[dict]] = {"deepspeed": [], "ours": []}
        for repeat in range(repeats):
            order = ["deepspeed", "ours"] if repeat % 2 == 0 else ["ours", "deepspeed"]
            for mode in order:
                results[mode].append(run_worker(prepared.bin_dir, mode, zero, steps, every, width))
        params = results["ours"][0]["params"]
        print(f"\nZeRO stage {zero} ({params / 1e6:.1f}M parameters; fp32 weights + AdamW ≈ {params * 12 / 1e6:.0f} MB of state per replica)")
        print(f"{'mode':<32} {'stall median':>13} {'stall p95':>10} {'other steps':>12} {'training':>9} {'until durable':>14}")
        medians = {}
        for mode, label in (("deepspeed", "DeepSpeed save_checkpoint"), ("ours", "concurrent (wrap_deepspeed_engine)")):
            stalls = [s for r in results[mode] for s in r["stalls"][1:]]  # the first save pays one-time allocations
            step_times = [s for r in results[mode] for s in r["step_times"][2:]]
            medians[mode] = statistics.median(stalls)
            print(f"{label:<32} {medians[mode] * 1000:>10.1f} ms {percentile(stalls, 95) * 1000:>7.1f} ms "
                  f"{statistics.median(step_times) * 1000:>9.1f} ms {statistics.median(r['train_s'] for r in results[mode]):>8.2f}s "
                  f"{statistics.median(r['durable_s'] for r in results[mode]):>13.2f}s")
        print(f"stall: concurrent / DeepSpeed = {medians['ours'] / medians['deepspeed']:.3f} "
              f"({medians['deepspeed'] / medians['ours']:.1f}x less time blocked)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one round / repeat of each")
    parser.add_argument("--skip-environments", action="store_true")
    args = parser.parse_args()
    if not args.skip_environments:
        environments(rounds=1 if args.quick else 2)
    deepspeed_checkpoints(repeats=1 if args.quick else 3, steps=16 if args.quick else 24, every=4, width=2048)
    return 0


if __name__ == "__main__":
    sys.exit(main())
