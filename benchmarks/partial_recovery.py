"""Partial recovery, before and after: what one node's fault costs a 2-node job. Printed, not asserted.

Run: `.venv/bin/python -m benchmarks.partial_recovery [--minutes 3] [--mtbf 40] [--mix kill] [--seed 1]`.

Runs benchmarks.goodput twice in a row, each on a fresh console and agents, with the same
faults drawn (same seed and mix): first with partial recovery off (`PARTIAL_RECOVERY=0`: every
resume is placed and prepared like a new job, as before), then on (the healthy nodes keep their
ranks and reuse what they prepared, the local checkpoint copy included). Prints each fault's
phases side by side, and where a resumed attempt spent its time (`--timeline`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

PHASES = (("detection", "detection"), ("rescheduling", "rescheduling"), ("restart", "placed → running"),
          ("startup", "process start → training"), ("checkpoint_load", "checkpoint load"),
          ("first_step", "fault → first step"))


def one_run(partial: bool, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.goodput", "--minutes", str(args.minutes), "--mtbf", str(args.mtbf),
               "--mix", args.mix, "--seed", str(args.seed), "--every", str(args.every), "--json", str(out)]
    if args.timeline:
        command.append("--timeline")
    env = {**os.environ, "PARTIAL_RECOVERY": "1" if partial else "0"}
    print(f"\n=== partial recovery {'on' if partial else 'off'} ===", flush=True)
    subprocess.run(command, env=env, check=True, cwd=Path(__file__).resolve().parent.parent)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def _s(value: float | None) -> str:
    return "—" if value is None or value != value else f"{value:.1f} s"


def compare(before: dict[str, Any], after: dict[str, Any]) -> None:
    print("\nPer fault, partial recovery off → on (the same faults drawn; each on a fresh console and agents)")
    print("| # | fault | " + " | ".join(label for _, label in PHASES) + " |")
    print("| --- | --- |" + " --- |" * len(PHASES))
    rows_before = [r for r in before["rows"] if r.get("interrupted")]
    rows_after = [r for r in after["rows"] if r.get("interrupted")]
    for index, (old, new) in enumerate(zip(rows_before, rows_after, strict=False), 1):
        cells = [f"{_s(old.get(key))} → **{_s(new.get(key))}**" for key, _ in PHASES]
        print(f"| {index} | {old['kind']} on {old['node']} / {new['kind']} on {new['node']} | " + " | ".join(cells) + " |")
    for name, rows in (("off", rows_before), ("on", rows_after)):
        firsts = [r["first_step"] for r in rows if r["first_step"] == r["first_step"]]
        if firsts:
            print(f"partial recovery {name}: {len(firsts)} fault(s), fault → first step median {statistics.median(firsts):.1f} s, "
                  f"mean {statistics.mean(firsts):.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3)
    parser.add_argument("--mtbf", type=float, default=40, help="mean seconds between faults")
    parser.add_argument("--mix", default="kill", help="faults to draw from (benchmarks.goodput's kinds)")
    parser.add_argument("--every", type=int, default=100, help="checkpoint every N steps")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeline", action="store_true", help="print each resumed attempt's first lines")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = one_run(False, args, Path(tmp) / "before.json")
        after = one_run(True, args, Path(tmp) / "after.json")
    compare(before, after)


if __name__ == "__main__":
    main()
