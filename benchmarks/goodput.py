"""Goodput under injected faults: effective training time, and what each fault cost. Printed, not asserted.

Run: `.venv/bin/python benchmarks/goodput.py [--quick] [--nodes 2|4] [--minutes 20] [--mtbf SECONDS]
[--mix kill,xid,reclaim,partition,console] [--seed 1]`.

A real console (daphne, Celery worker and beat), SeaweedFS and node agents with one simulated
GPU each: two copies of the same CPU training job (`--nodes` nodes, DDP through torchrun,
checkpointing with the platform's library, jobs/tests/e2e/scripts/train_ckpt.py) run side by
side for the same wall time, as Spot jobs (an interruption pauses one and it resumes from its
newest checkpoint on free nodes; spot has no failover limit). Faults hit only the first copy,
at exponential intervals of mean `--mtbf`, drawn from the mix:

- kill: the node's agent is SIGKILLed (node death; it comes back 5 s later, as a supervisor
  would restart it);
- xid: XID 79 on the simulated GPU (the node is cordoned; staff uncordon it once it resumed);
- reclaim: the node is reclaimed from spot (cordoned; uncordoned once it resumed);
- partition: the agent is frozen (SIGSTOP) for 20 s: no traffic in or out, as a network cut;
  its training processes run on;
- console: daphne restarts (2 s down): nothing should be lost.

Per fault: detection (injected → the console ended the attempt), rescheduling (→ next attempt
placed), restart (→ its processes running), checkpoint load (the library's own line), first
step after resume (from the injection), steps redone, and the time charged to the user (none
for the platform's faults). Per job: effective training time ratio (ETTR) = newest step
reached × median step time / wall time, and the console's own goodput (jobs.recovery.goodput); the
copy without faults is the baseline on this noisy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

os.environ.setdefault("BENCH_DATABASE", "simpleai_goodput_bench")
os.environ.setdefault("BENCH_REDIS_URL", "redis://127.0.0.1:6379/7")
try:
    from _stack import BenchStack
except ImportError:  # run as `python -m benchmarks.goodput`
    from benchmarks._stack import BenchStack

SCRIPT = Path(__file__).resolve().parent.parent / "jobs" / "tests" / "e2e" / "scripts" / "train_ckpt.py"
STEP = re.compile(r"step (\d+) loss")
KINDS = ("kill", "xid", "reclaim", "partition", "console")
PARTITION_SECONDS = 20


@dataclass
class Fault:
    kind: str
    node: str
    at: float  # unix time injected
    attempt: int  # the job's attempt when injected
    notes: dict = field(default_factory=dict)


def wait_for(predicate, timeout: float = 180.0, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None


def create(owner, name: str, nodes: int, script_url: str, steps_every: int, sleep: float):
    from jobs import actions

    return actions.create_job(owner, {
        "name": name, "learning_type": "spot", "framework": "pytorch", "framework_version": "2.13.0",
        "failover_enabled": False, "server_type": "g2", "gpus_per_node": 1, "memory_gb": 256, "node_count": nodes,
        "shm_size_gb": 8, "image_url": "trainer:1", "registry_username": "", "volume_mount_path": "",
        "script_url": script_url, "keep_alive_minutes": 0,
        "command": f"PYTHONPATH=$CHECKPOINT_VENDOR torchrun train_ckpt.py --steps 1000000 --every {steps_every} --sleep {sleep}",
    }, [])


def steps_of(job_id: int) -> list[tuple[int, float, int]]:
    """(attempt, ts, step) of every step line of the master stream, in order."""
    from monitoring.models import LogLine

    rows = LogLine.objects.filter(job_id=job_id, stream="master", text__contains=" loss ").order_by("attempt", "seq")
    return [(a, ts.timestamp(), int(m.group(1))) for a, ts, text in rows.values_list("attempt", "ts", "text")
            if (m := STEP.search(text))]


def current_nodes(job_id: int) -> list[str]:
    from jobs.models import JobAttempt, TrainingJob

    job = TrainingJob.objects.get(pk=job_id)
    attempt = JobAttempt.objects.filter(job=job, number=job.current_attempt).first()
    return list(attempt.placements.values_list("node_name", flat=True)) if attempt else []


def training(job_id: int, since: float, after_attempt: int = 0) -> bool:
    """The job runs an attempt newer than `after_attempt` and has logged a step after `since`."""
    from jobs.models import TrainingJob

    job = TrainingJob.objects.get(pk=job_id)
    return job.status == "Running" and job.current_attempt > after_attempt and any(
        ts > since and a == job.current_attempt for a, ts, _ in steps_of(job_id)[-20:])


def inject(kind: str, node: str, stack, agents: dict, tokens: dict) -> None:
    from jobs.models import Node
    from jobs.nodes import hardware

    node_id = Node.objects.get(name=node).pk
    if kind == "kill":
        agents[node].kill()
        agents[node].wait()
    elif kind == "xid":
        hardware.inject_fault(node_id, "xid", 0, 79)
    elif kind == "reclaim":
        hardware.reclaim_from_spot(node_id, "spot capacity reclaimed (benchmark)")
    elif kind == "partition":
        os.kill(agents[node].pid, signal.SIGSTOP)
    elif kind == "console":
        stack.restart_console()


def repair(kind: str, node: str, stack, agents: dict, tokens: dict, at: float) -> None:
    """What an operator or a supervisor does after the fault: the node comes back."""
    if kind == "kill":
        time.sleep(max(0.0, at + 5 - time.time()))
        agents[node] = stack.agent(node, tokens[node], gpus=1)
    elif kind == "partition":
        time.sleep(max(0.0, at + PARTITION_SECONDS - time.time()))
        os.kill(agents[node].pid, signal.SIGCONT)


def heal_nodes() -> None:
    from jobs.models import Node, NodeGPU

    Node.objects.update(cordoned=False, cordon_reason="")
    NodeGPU.objects.update(healthy=True)


def breakdown(job_id: int, fault: Fault) -> dict:
    """What the fault cost, from the console's rows and the job's log lines."""
    from jobs.models import JobAttempt
    from jobs.recovery import goodput, goodput_load

    attempts = {a.number: a for a in JobAttempt.objects.filter(job_id=job_id)}
    hit = attempts.get(fault.attempt)
    following = attempts.get(fault.attempt + 1)
    row = {"kind": fault.kind, "node": fault.node}
    if hit is None or hit.ended_at is None or hit.ended_at.timestamp() < fault.at - 1 or following is None:
        steps = steps_of(job_id)
        before = [ts for a, ts, _ in steps if ts <= fault.at]
        after = [ts for a, ts, _ in steps if ts > fault.at]
        gap = (after[0] - before[-1]) if before and after else float("nan")
        row.update(interrupted=False, pause=gap)  # no new attempt: the longest pause in its steps
        return row
    times = {t.number: t for t in goodput_load.attempt_times(hit.job)}
    [loss] = [loss for loss in goodput.losses(list(times.values()), datetime.now(UTC)) if loss.attempt == hit.number]
    steps = steps_of(job_id)
    reached = max((s for a, _, s in steps if a == hit.number), default=0)
    first_after = next((ts for a, ts, _ in steps if a == following.number), None)
    if first_after is None:  # why it did not train again within the window: its newest lines
        from monitoring.models import LogLine

        lines = LogLine.objects.filter(job_id=job_id, attempt=following.number).order_by("-ts")[:4]
        row["tail"] = [line.text[:160] for line in reversed(lines)]
    row["timeline"] = timeline(job_id, following.number, fault.at)
    row.update(
        interrupted=True, detection=hit.ended_at.timestamp() - fault.at,
        rescheduling=loss.rescheduling, restart=loss.preparation, checkpoint_load=loss.checkpoint_load,
        first_step=(first_after - fault.at) if first_after else float("nan"),
        steps_redone=max(0, reached - (following.resume_step or 0)),
        charged=loss.charged, fault_by=loss.fault_by,
    )
    # what is left of fault → first step: the training process starting (imports, rendezvous)
    row["startup"] = row["first_step"] - row["detection"] - row["rescheduling"] - row["restart"] - row["checkpoint_load"]
    return row


def timeline(job_id: int, number: int, since: float, per_stream: int = 14) -> list[str]:
    """The resumed attempt's first lines on every stream, in seconds after the fault: where a
    restart spends its time (preparation, process start and rendezvous, checkpoint load)."""
    from monitoring.models import LogLine

    rows = LogLine.objects.filter(job_id=job_id, attempt=number).order_by("stream", "seq")
    seen: dict[str, int] = {}
    lines = []
    for stream, ts, text in rows.values_list("stream", "ts", "text"):
        seen[stream] = seen.get(stream, 0) + 1
        if seen[stream] <= per_stream:
            lines.append((ts.timestamp() - since, f"{ts.timestamp() - since:6.1f} s {stream}: {text[:130]}"))
    return [line for _, line in sorted(lines)]


def ettr(job_id: int, wall: float, start_step: int) -> tuple[float, int, float]:
    """(ETTR, steps gained in the window, median step seconds) from the job's own step lines:
    the steps it moved forward (a redone step counts once) at its own pace, over the window."""
    steps = steps_of(job_id)
    gaps = [b[1] - a[1] for a, b in zip(steps, steps[1:], strict=False) if a[0] == b[0] and b[2] == a[2] + 1]
    step_time = statistics.median(gaps) if gaps else float("nan")
    gained = max((s for _, _, s in steps), default=0) - start_step
    return gained * step_time / wall, gained, step_time


def run(args) -> None:
    with BenchStack() as stack:
        from django.contrib.auth import get_user_model

        from jobs import actions
        from jobs.models import Node, NodeToken, TrainingJob
        from jobs.recovery import goodput_load

        owner = get_user_model().objects.create_user("bench")
        script_url = stack.upload_as(owner, "uploads/train_ckpt.py", SCRIPT)
        names = [f"node-{i}" for i in range(2 * args.nodes + 2)]
        tokens = {name: NodeToken.mint(name)[1] for name in names}
        agents = {name: stack.agent(name, tokens[name], gpus=1) for name in names}
        wait_for(lambda: Node.objects.filter(connected=True).count() == len(names), timeout=120)
        faulty = create(owner, "with-faults", args.nodes, script_url, args.every, args.sleep)
        clean = create(owner, "without-faults", args.nodes, script_url, args.every, args.sleep)
        began = time.time()
        if not wait_for(lambda: training(faulty.pk, began) and training(clean.pk, began), timeout=300):
            raise SystemExit("the jobs did not start training")
        print(f"both jobs training {time.time() - began:.0f} s after creation; faults every {args.mtbf:.0f} s on average "
              f"from {','.join(args.mix)} for {args.minutes:g} min")
        # the window measured starts now, both jobs training (their startup is not what faults cost)
        began = time.time()
        start_steps = {job.pk: max((s for _, _, s in steps_of(job.pk)), default=0) for job in (faulty, clean)}
        rng = random.Random(args.seed)
        end = began + args.minutes * 60
        faults: list[Fault] = []
        next_at = time.time() + rng.expovariate(1 / args.mtbf)
        while time.time() < end:
            if time.time() < next_at:
                time.sleep(min(0.5, max(0.0, next_at - time.time())))
                continue
            job = TrainingJob.objects.get(pk=faulty.pk)
            nodes = current_nodes(faulty.pk)
            if job.status != "Running" or not nodes:  # the previous fault is not over: the next waits for it
                time.sleep(0.5)
                continue
            kind = rng.choice(args.mix)
            fault = Fault(kind, rng.choice(nodes), time.time(), job.current_attempt)
            print(f"  {fault.at - began:6.0f} s: {kind} on {fault.node} (attempt {fault.attempt})", flush=True)
            inject(kind, fault.node, stack, agents, tokens)
            repair(kind, fault.node, stack, agents, tokens, fault.at)
            # every fault but a console restart ends the attempt: recovered once a newer one trains
            newer_than = fault.attempt if kind != "console" else 0
            back = wait_for(lambda f=fault, n=newer_than: training(faulty.pk, f.at, n), timeout=max(5.0, end - time.time()))
            print(f"  {time.time() - began:6.0f} s: {'training again' if back else 'not training again in the window'}", flush=True)
            heal_nodes()
            faults.append(fault)
            next_at = time.time() + rng.expovariate(1 / args.mtbf)
        wall = time.time() - began
        rows = [breakdown(faulty.pk, fault) for fault in faults]
        results = {}
        for job in (faulty, clean):
            results[job.name] = (*ettr(job.pk, wall, start_steps[job.pk]),
                                 goodput_load.job_goodput(TrainingJob.objects.get(pk=job.pk)).ratio)
            actions.stop_job(job.pk, "benchmark over")
        report(args, wall, rows, results)
        if args.json:  # for benchmarks.partial_recovery, which runs this twice and compares
            Path(args.json).write_text(json.dumps({"wall": wall, "rows": rows, "results": results}, default=str))


def _s(value) -> str:
    return "—" if value is None or value != value else f"{value:5.1f} s"


def report(args, wall: float, rows: list[dict], results: dict) -> None:
    print(f"\nGoodput, {args.nodes}-node CPU job (1 rank per node, checkpoint every {args.every} steps), "
          f"a {wall / 60:.1f}-min window once both trained, MTBF {args.mtbf:.0f} s, seed {args.seed}")
    print("| job | ETTR (steps gained × step time / window) | steps gained | step time | console goodput (whole job) |")
    print("| --- | --- | --- | --- | --- |")
    for name, (ratio, newest, step_time, console) in results.items():
        print(f"| {name} | {ratio * 100:.1f} % | {newest} | {step_time:.3f} s | "
              f"{'—' if console is None else f'{console * 100:.1f} %'} |")
    base = results["without-faults"][0]
    if base:
        print(f"relative ETTR (with faults / without): {results['with-faults'][0] / base * 100:.1f} %")
    step_time = results["with-faults"][2]
    for row in rows:
        if row["interrupted"]:
            row["redone_seconds"] = row["steps_redone"] * step_time
    print("\n| fault | node | detection | rescheduling | restart (placed → running) | process start → training "
          "| checkpoint load | fault → first step | steps redone | charged |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        if not row["interrupted"]:
            print(f"| {row['kind']} | {row['node']} | not interrupted (longest pause in steps {_s(row['pause'])}) "
                  f"| | | | | | 0 | none |")
            continue
        print(f"| {row['kind']} | {row['node']} | {_s(row['detection'])} | {_s(row['rescheduling'])} | {_s(row['restart'])} "
              f"| {_s(row['startup'])} "
              f"| {_s(row['checkpoint_load'])} | {_s(row['first_step'])} | {row['steps_redone']} ({_s(row['redone_seconds'])}) "
              f"| {'none' if not row['charged'] else _s(row['charged'])} ({row['fault_by']}) |")
    if args.timeline:
        for row in rows:
            print(f"\n{row['kind']} on {row['node']}: the resumed attempt's lines")
            for line in row.get("timeline", []):
                print(f"  {line}")
    for row in rows:
        for line in row.get("tail", []):
            print(f"  ({row['kind']} on {row['node']}: no step in the window; its newest line: {line})")
    lost = [row["first_step"] + row["redone_seconds"] for row in rows if row["interrupted"] and row["first_step"] == row["first_step"]]
    if lost:
        per_fault = statistics.mean(lost)
        print(f"\nmean time lost per interrupting fault (to first step after resume, plus steps redone): {per_fault:.1f} s; "
              f"at that cost ETTR ≈ {100 - per_fault / 600 * 100:.1f} % at one fault per 10 min, "
              f"{100 - per_fault / 3600 * 100:.1f} % at one per hour (before startup)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2, choices=(2, 4))
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--mtbf", type=float, default=300, help="mean seconds between faults")
    parser.add_argument("--mix", default=",".join(KINDS), help=f"faults to draw from: {','.join(KINDS)}")
    parser.add_argument("--every", type=int, default=100, help="checkpoint every N steps (~30 s at the default pace)")
    parser.add_argument("--sleep", type=float, default=0.25, help="seconds each step sleeps (besides its compute)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="3 minutes, a fault every 40 s on average")
    parser.add_argument("--json", default="", help="also write the per-fault rows and the results to this file")
    parser.add_argument("--timeline", action="store_true", help="print each resumed attempt's first lines, timed from the fault")
    args = parser.parse_args()
    args.mix = [kind for kind in args.mix.split(",") if kind]
    unknown = set(args.mix) - set(KINDS)
    if unknown:
        parser.error(f"unknown fault kind(s) {', '.join(sorted(unknown))}; known: {', '.join(KINDS)}")
    if args.quick:
        args.minutes, args.mtbf = 3, 40
    run(args)


if __name__ == "__main__":
    main()
