"""The placement decision right after a wave of exits on a big, busy cluster. Prints figures; asserts nothing.

Run: `.venv/bin/python -m benchmarks.schedule_wave [--nodes 1000] [--queued 4000] [--rounds 3]
[--against DIR]`. Plain data, no database: a ledger of `--nodes` 8-GPU nodes where a wave of
exits has just freed one to two GPUs on most nodes (what a fleet of 10 s jobs looks like in the
fleet benchmark's drain), and `--queued` waiting jobs of four users, 1-2 nodes × 1-8 GPUs. The
run places what fits (hundreds of jobs, backfilled) and says why the rest wait: the decision
jobs.scheduling.placement.schedule makes on every scheduler run of a drain, timed. With `--against DIR`
the same ledger and queue are decided by DIR's scheduler too (another checkout, e.g. a
`git worktree` of an earlier commit), in alternating rounds, and the ratio is printed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

NOW = datetime(2026, 12, 4, tzinfo=UTC)


def decide(nodes: int, queued: int, seed: int) -> tuple[float, int, int]:
    """One decision on a fresh ledger: (seconds, jobs placed, jobs waiting)."""
    try:
        from jobs.scheduling.capacity import JobHold, NodeInfo, build
        from jobs.scheduling.decision import JobRequest
        from jobs.scheduling.placement import schedule
    except ModuleNotFoundError:  # an --against checkout from before jobs/ had sub-packages
        capacity, scheduling = (importlib.import_module(name) for name in ("jobs.capacity", "jobs.scheduling"))
        JobHold, NodeInfo, build = capacity.JobHold, capacity.NodeInfo, capacity.build
        JobRequest, schedule = scheduling.JobRequest, scheduling.schedule

    rng = random.Random(seed)
    infos = [NodeInfo(i, f"node-{i:04d}", "g2", tuple(range(8))) for i in range(1, nodes + 1)]
    holds = []
    for info in infos:
        busy = tuple(sorted(rng.sample(range(8), rng.choice([6, 7, 7, 8, 8]))))
        holds.append(JobHold(info.node_id, busy, 100_000 + info.node_id, f"running-{info.node_id}", rng.randint(1, 4)))
    ledger = build(infos, holds, [], [], NOW, timedelta(seconds=40))
    requests = [JobRequest(i, rng.randint(1, 4), "g2", rng.randint(1, 8), rng.choice([1, 2])) for i in range(1, queued + 1)]
    started = time.perf_counter()
    decision = schedule(requests, ledger)
    return time.perf_counter() - started, len(decision.placed), len(decision.waiting)


def in_tree(tree: Path, nodes: int, queued: int, seed: int) -> tuple[float, int, int]:
    """The same decision with `tree`'s scheduler, in a process of its own."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]); "
            "from schedule_wave import decide; print(json.dumps(decide(*map(int, sys.argv[3:]))))")
    out = subprocess.run([sys.executable, "-c", code, str(tree), str(Path(__file__).parent), str(nodes), str(queued), str(seed)],
                         capture_output=True, text=True, check=True).stdout
    return tuple(json.loads(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--queued", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--against", default="", help="another checkout: its decision is timed too, alternating")
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent
    trees = {"this checkout": here} | ({f"--against {args.against}": Path(args.against).resolve()} if args.against else {})
    timed: dict[str, list[float]] = {name: [] for name in trees}
    counts: dict[str, tuple[int, int]] = {}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            seconds, placed, waiting = in_tree(tree, args.nodes, args.queued, args.seed)
            timed[name].append(seconds)
            counts[name] = (placed, waiting)
    print(f"{args.nodes} nodes × 8 GPUs after a wave of exits ({args.queued} queued, 4 users, 1-2 nodes × 1-8 GPUs), "
          f"{args.rounds} round(s)")
    for name in trees:
        placed, waiting = counts[name]
        print(f"  {name}: decision median {statistics.median(timed[name]) * 1000:.0f} ms, "
              f"max {max(timed[name]) * 1000:.0f} ms; placed {placed}, waiting {waiting}")
    if args.against:
        mine, theirs = (statistics.median(timed[name]) for name in trees)
        print(f"  ratio: --against takes {theirs / mine:.1f}× this checkout's time")


if __name__ == "__main__":
    main()
