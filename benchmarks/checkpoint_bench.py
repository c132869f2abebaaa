"""Side-by-side checkpoint benchmark: no checkpoint, synchronous torch.save, DCP async_save, ours.

    .venv/bin/python -m benchmarks.checkpoint_bench            # full run (~7 minutes on an idle 2-core machine)
    .venv/bin/python -m benchmarks.checkpoint_bench --quick    # a short run (~1.5 minutes)
    .venv/bin/python -m benchmarks.checkpoint_bench --against ../main --modes none,torch_save,ours,against

`--against DIR` adds the mode `against`: the same engine run from DIR's `nodeagent/vendor` (another
checkout, e.g. a `git worktree` of the previous commit), in the same rotation as every other mode,
and prints this checkout's figures against it. Both run with a CHECKPOINT_SIGNING_KEY in their
environment, as on the platform (a tree that does not sign ignores it).

The same MLP (~33.6M parameters + AdamW: ~403 MB of state) trains for N steps in every mode and
checkpoints every K steps to the same storage (`--dir`). Each mode runs in a fresh subprocess, the
order of the modes rotates between repeats, warm-up steps (with one checkpoint each, to pay
one-time allocations) are excluded, and the figures are medians over the repeats.

Per mode it prints: the stall per checkpoint (time training was blocked by the checkpoint call,
median and p95 over all checkpoints of all repeats), the training time and the total time until
the last checkpoint is durable, the slowdown of the other steps (median step time against the
no-checkpoint run), the bytes written against the raw state bytes, the peak RSS and the process
CPU time; then the ratios: stall against torch.save and DCP async_save, overhead against no
checkpoint (training time, and until durable), the extra CPU time per checkpoint, and the
perceived throughput (state bytes / stall). Wall-clock figures suffer when other processes share
the machine (the load average is printed); CPU time does not. Every mode's checkpoint is durable
in the same sense: fsynced (torch.save is followed by os.fsync; DCP's writer syncs its files).
Figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODES = ("none", "torch_save", "dcp_async", "ours", "against")
VENDOR = Path(__file__).resolve().parents[1] / "nodeagent" / "vendor"
SIGNING_KEY = "5c" * 32  # what the platform would put into the job's environment


# --- one mode, in its own process ---------------------------------------------------------------

def build(batch: int) -> tuple[Any, Any, Any]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2048, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(),
                          nn.Linear(4096, 2048))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = (torch.randn(batch, 2048), torch.randn(batch, 2048))
    return model, optimizer, data


class Checkpointer:
    """One way of checkpointing: `save(step)` blocks training; `finish()` waits for durability."""

    def __init__(self, mode: str, directory: Path, model: Any, optimizer: Any, vendor: Path = VENDOR) -> None:
        self.mode, self.directory, self.model, self.optimizer = mode, directory, model, optimizer
        self.future: Any = None
        self.engine: Any = None
        if mode in ("ours", "against"):
            sys.path.insert(0, str(vendor))
            from concurrent_checkpoint import CheckpointEngine

            self.engine = CheckpointEngine(directory, host_cache_size=2, parser_threads=2, keep_last=1000)

    def state(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def save(self, step: int) -> None:
        if self.mode == "torch_save":
            import torch

            path = self.directory / f"step-{step}.pt"
            with open(path, "wb") as handle:
                torch.save(self.state(), handle)
                handle.flush()
                os.fsync(handle.fileno())
        elif self.mode == "dcp_async":
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.state_dict import get_state_dict

            if self.future is not None:
                self.future.result()  # one save in flight
            model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
            self.future = dcp.async_save({"model": model_state, "optim": optimizer_state},
                                         checkpoint_id=str(self.directory / f"step-{step}"))
        elif self.mode in ("ours", "against"):
            self.engine.save(step, self.state())

    def finish(self) -> None:
        if self.future is not None:
            self.future.result()
            self.future = None
        if self.engine is not None:
            self.engine.wait()


def raw_bytes(state: Any) -> int:
    import torch

    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(raw_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(raw_bytes(v) for v in state)
    return 0


def tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_mode(mode: str, steps: int, every: int, warmup: int, batch: int, directory: Path,
             vendor: Path = VENDOR) -> dict:
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    model, optimizer, (x, y) = build(batch)
    checkpointer = Checkpointer(mode, directory, model, optimizer, vendor)

    def train_step() -> None:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(warmup):
        train_step()
    checkpointer.save(0)  # one-time costs (host cache, DCP planner) belong to the warm-up
    checkpointer.finish()
    state_bytes = raw_bytes(checkpointer.state())

    step_times, stalls = [], []
    cpu_began = _cpu_seconds()
    began = time.perf_counter()
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        train_step()
        t1 = time.perf_counter()
        if mode != "none" and step % every == 0:
            checkpointer.save(step)
            stalls.append(time.perf_counter() - t1)
        else:
            step_times.append(t1 - t0)
    trained = time.perf_counter()
    checkpointer.finish()
    durable = time.perf_counter()
    last = {"torch_save": directory / f"step-{steps}.pt", "dcp_async": directory / f"step-{steps}",
            "ours": directory / "concurrent_checkpoint" / f"step-{steps}",
            "against": directory / "concurrent_checkpoint" / f"step-{steps}"}.get(mode)
    return {
        "mode": mode, "state_bytes": state_bytes, "stalls": stalls, "step_times": step_times,
        "train_seconds": trained - began, "durable_seconds": durable - began,
        "bytes_written": tree_bytes(last) if last is not None else 0,
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "cpu_seconds": _cpu_seconds() - cpu_began,
    }


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- the parent: runs, rotation, table ----------------------------------------------------------

def child_command(mode: str, args: argparse.Namespace, directory: Path) -> list[str]:
    vendor = Path(args.against).resolve() / "nodeagent" / "vendor" if mode == "against" else VENDOR
    return [sys.executable, __file__, "--child", mode, "--steps", str(args.steps), "--every", str(args.every),
            "--warmup", str(args.warmup), "--batch", str(args.batch), "--dir", str(directory),
            "--vendor", str(vendor)]


def run_all(args: argparse.Namespace) -> dict[str, list[dict]]:
    modes = args.modes
    results: dict[str, list[dict]] = {m: [] for m in modes}
    base = Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    for repeat in range(args.repeats):
        order = modes[repeat % len(modes):] + modes[:repeat % len(modes)]
        for mode in order:
            directory = Path(tempfile.mkdtemp(prefix=f"{mode}-", dir=base))
            env = {**os.environ, "PYTHONWARNINGS": "ignore", "CHECKPOINT_SIGNING_KEY": SIGNING_KEY}
            done = subprocess.run(child_command(mode, args, directory), capture_output=True, text=True, env=env)
            shutil.rmtree(directory, ignore_errors=True)
            if done.returncode != 0:
                raise SystemExit(f"{mode} failed:\n{done.stderr[-4000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            results[mode].append(result)
            print(f"  repeat {repeat + 1}/{args.repeats} {mode:<10} stall median "
                  f"{_median(result['stalls']) * 1000:8.1f} ms   durable after {result['durable_seconds']:6.2f} s",
                  file=sys.stderr, flush=True)
    return results


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _p95(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def summarize(results: dict[str, list[dict]]) -> dict[str, dict[str, float]]:
    rows = {}
    for mode, runs in results.items():
        rows[mode] = {
            "stall_median": _median([x for r in runs for x in r["stalls"]]),  # pooled over repeats
            "stall_p95": _p95([x for r in runs for x in r["stalls"]]),
            "trained": _median([r["train_seconds"] for r in runs]),
            "durable": _median([r["durable_seconds"] for r in runs]),
            "step": _median([_median(r["step_times"]) for r in runs]),
            "written": _median([r["bytes_written"] for r in runs]),
            "raw": runs[0]["state_bytes"],
            "rss": _median([r["peak_rss"] for r in runs]),
            "cpu": _median([r["cpu_seconds"] for r in runs]),
            # paired with the no-checkpoint run of the same repeat (adjacent in time), which
            # cancels slow drifts in the machine's load
            "step_ratio": _paired(results, mode, lambda r: _median(r["step_times"])),
            "trained_ratio": _paired(results, mode, lambda r: r["train_seconds"]),
            "durable_ratio": _paired(results, mode, lambda r: r["durable_seconds"]),
        }
    return rows


def _paired(results: dict[str, list[dict]], mode: str, measure: Any) -> float:
    pairs = zip(results[mode], results["none"], strict=True)
    return _median([measure(run) / measure(base) - 1 for run, base in pairs])


def print_table(rows: dict[str, dict[str, float]], args: argparse.Namespace) -> None:
    none, save, dcp = rows["none"], rows.get("torch_save"), rows.get("dcp_async")
    state_gb = none["raw"] / 1e9
    print(f"\nload average before/after: {args.load_before:.2f} / {args.load_after:.2f} "
          "(other processes on this machine inflate wall-clock figures; CPU time does not depend on them)")
    print(f"state {state_gb * 1000:.0f} MB (MLP 33.6M params + AdamW), {args.steps} measured steps of batch "
          f"{args.batch}, a checkpoint every {args.every}, {args.repeats} repeat(s), medians; "
          f"{os.cpu_count()} CPUs; storage {args.dir}\n")
    print("| mode | stall median | stall p95 | training time | durable after | other steps "
          "| bytes written / raw | peak RSS | CPU time |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode in rows:
        r = rows[mode]
        on = mode != "none"
        print(f"| {mode} | {_ms(r['stall_median'], on)} | {_ms(r['stall_p95'], on)} | {r['trained']:.2f} s "
              f"| {r['durable']:.2f} s | {_pct(r['step_ratio'])} "
              f"| {r['written'] / r['raw']:.3f} | {r['rss'] / 2**30:.2f} GiB | {r['cpu']:.1f} s |" if on else
              f"| {mode} | - | - | {r['trained']:.2f} s | {r['durable']:.2f} s | {r['step'] * 1000:.0f} ms/step "
              f"| - | {r['rss'] / 2**30:.2f} GiB | {r['cpu']:.1f} s |")
    print("\n| mode | stall vs torch.save | stall vs DCP async_save | overhead vs none (training) "
          "| overhead vs none (until durable) | extra CPU per checkpoint | perceived GB/s |")
    print("|---|---|---|---|---|---|---|")
    checkpoints = args.steps // args.every
    for mode in [m for m in rows if m != "none"]:
        r = rows[mode]
        print(f"| {mode} | {_ratio(r['stall_median'], save)} "
              f"| {_ratio(r['stall_median'], dcp)} | {_pct(r['trained_ratio'])} "
              f"| {_pct(r['durable_ratio'])} | {(r['cpu'] - none['cpu']) / checkpoints:.2f} s "
              f"| {state_gb / r['stall_median']:.1f} |")
    if "ours" in rows and "against" in rows:
        ours, other = rows["ours"], rows["against"]
        print(f"\nthis checkout against {args.against}: stall median {ours['stall_median'] / other['stall_median']:.3f}x, "
              f"stall p95 {ours['stall_p95'] / other['stall_p95']:.3f}x, training time {ours['trained'] / other['trained']:.3f}x, "
              f"durable after {ours['durable'] / other['durable']:.3f}x, "
              f"extra CPU per checkpoint {(ours['cpu'] - none['cpu']) / checkpoints:.2f} s vs "
              f"{(other['cpu'] - none['cpu']) / checkpoints:.2f} s")


def _ratio(stall: float, reference: dict[str, float] | None) -> str:
    return f"{stall / reference['stall_median']:.3f}x" if reference else "-"


def _ms(seconds: float, show: bool) -> str:
    return f"{seconds * 1000:.1f} ms" if show else "-"


def _pct(fraction: float) -> str:
    return f"{fraction * 100:+.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run: fewer steps, one repeat")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "checkpoint-bench"))
    parser.add_argument("--json", help="also write every run's raw figures to this file")
    parser.add_argument("--from-json", help="print the tables of an earlier run's --json file, run nothing")
    parser.add_argument("--against", help="another checkout: its library runs as mode `against`, in rotation")
    parser.add_argument("--modes", help="comma-separated subset of " + ",".join(MODES) + " (`none` is always run)")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--vendor", default=str(VENDOR), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_mode(args.child, args.steps, args.every, args.warmup, args.batch, Path(args.dir),
                                  Path(args.vendor))))
        return
    wanted = args.modes.split(",") if args.modes else [m for m in MODES if m != "against" or args.against]
    unknown = set(wanted) - set(MODES)
    if unknown or ("against" in wanted and not args.against):
        parser.error(f"unknown modes {sorted(unknown)}" if unknown else "mode `against` needs --against DIR")
    args.modes = tuple(m for m in MODES if m in wanted or m == "none")
    if args.quick:
        args.steps, args.repeats = 30, 1
    args.load_before = os.getloadavg()[0]
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        for key, value in saved["meta"].items():
            setattr(args, key, value)
        print_table(summarize(saved["runs"]), args)
        return
    results = run_all(args)
    args.load_after = os.getloadavg()[0]
    if args.json:
        meta = {k: getattr(args, k) for k in ("steps", "every", "batch", "repeats", "dir", "load_before", "load_after",
                                              "against")}
        Path(args.json).write_text(json.dumps({"meta": meta, "runs": results}))
    print_table(summarize(results), args)
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
