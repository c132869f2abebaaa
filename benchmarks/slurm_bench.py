"""Slurm backend: submit → first log line through Slurm vs through our agents, and a 200-job drain.

Run: `.venv/bin/python -m benchmarks.slurm_bench [--runs 7] [--drain 200] [--drained 30]` as root on a machine with
Debian's Slurm packages (.ci/run installs them). Prints figures; asserts nothing.

Everything is real: a console (daphne, Celery worker and beat, SeaweedFS, PostgreSQL), two node
agents serving g2, and a local Slurm 22.05 (slurmctld, two slurmd with 8 fake GPUs each,
slurmrestd with JWT) serving g3. Part 1 creates the same one-node job through the REST API on
both backends, alternating which goes first, and times the API answer, the first log line and
the command's own first line; from slurmctld's log, also Slurm's own wait between the submission
and its scheduler starting the job (22.05 starts a batch job only in its next scheduling pass,
main or backfill, which come about once a second), and `Running` less that wait. Part 2 queues `--drain` jobs of mixed shapes (gangs of 2 nodes × 4
GPUs, whole nodes, small jobs) at once and times how long Slurm takes to run them all, then
checks from Slurm's own completion records that no node ever held more than its 8 GPUs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from collections import defaultdict
from typing import Any

from benchmarks._stack import BenchStack, api_job, api_user, percentile, post_json
from benchmarks._stack import wait_for as _wait_for

SHAPES = [(2, 4), (1, 8), (1, 2), (2, 1), (1, 1)]  # (nodes, GPUs per node), cycled


def wait_for(predicate, timeout: float = 120.0, interval: float = 0.01):
    return _wait_for(predicate, timeout=timeout, interval=interval)


def job_payload(name: str, server_type: str, command: str, nodes: int = 1, gpus: int = 1) -> dict:
    memory = {"g2": 256, "g3": 512}[server_type] * gpus
    return api_job(name, server_type=server_type, gpus_per_node=gpus, memory_gb=memory, node_count=nodes,
                   shm_size_gb=1, command=command, keep_alive_minutes=0)


TRACES: dict[str, tuple[int, float]] = {}  # backend → (job id, wall clock of its API call): the last run's


def time_one_start(stack: BenchStack, token: str, backend: str, run: int, slurm_root: Any = None) -> tuple[float, ...]:
    from jobs.models import JobStatusChange, TrainingJob
    from monitoring.models import LogLine

    marker = f"first-line-{backend}-{run}"
    began, wall = time.perf_counter(), time.time()
    job_id = post_json(f"{stack.url}/api/v1/training-jobs/", token, job_payload(
        f"start-{backend}-{run}", "g2" if backend == "agents" else "g3", f"echo {marker}"))["id"]
    answered = time.perf_counter()
    TRACES[backend] = (job_id, wall)
    wait_for(lambda: LogLine.objects.filter(job_id=job_id).exclude(text__startswith="[SLURM]").exists())
    first_line = time.perf_counter()
    wait_for(lambda: LogLine.objects.filter(job_id=job_id, text=marker).exists())
    command_line = time.perf_counter()
    wait_for(lambda: TrainingJob.objects.filter(pk=job_id, status="Completed").exists())
    completed = time.perf_counter()
    # nodes assigned: the agents' scheduler placed it, or Slurm allocated it and the batch step redeemed its key
    def status_at(status: str) -> float:
        return JobStatusChange.objects.get(job_id=job_id, new_status=status).created_at.timestamp() - wall

    from benchmarks.slurm_trace import slurm_started
    from jobs.slurm.models import SlurmJob

    slurm_job = SlurmJob.objects.filter(training_job_id=job_id).values_list("submitted_at", "slurm_job_id").first()
    to_slurm = slurm_job[0].timestamp() - wall if slurm_job else float("nan")
    started = slurm_started(slurm_root, slurm_job[1]) if slurm_job and slurm_root else None
    # Slurm's own wait: from the submission to its scheduler starting the job (slurmctld's log, ms)
    slurm_wait = started - slurm_job[0].timestamp() if started and slurm_job else float("nan")
    running = status_at("Running")
    return (answered - began, to_slurm, status_at("Creating"), running, first_line - began,
            command_line - began, completed - began, slurm_wait, running - (slurm_wait if slurm_job else 0.0))


def part_one(stack: BenchStack, token: str, runs: int, slurm_root: Any = None) -> None:
    rows: dict[str, list[tuple[float, ...]]] = {"agents": [], "slurm": []}
    for run in range(runs):
        order = ("agents", "slurm") if run % 2 == 0 else ("slurm", "agents")
        for backend in order:
            rows[backend].append(time_one_start(stack, token, backend, run, slurm_root))
            time.sleep(0.5)
    print(f"\n1. Submit → first log line, {runs} runs each, alternating (seconds from the API call; medians, p90 in brackets)")
    print(f"   {'':<28}{'agents':>16}{'Slurm':>16}{'Slurm / agents':>16}")
    for label, index in (("API answered", 0), ("submitted to Slurm", 1), ("nodes assigned (Creating)", 2),
                         ("Running", 3), ("first log line", 4), ("command's first line", 5),
                         ("Completed", 6), ("Slurm's own wait to start it", 7),
                         ("Running, less that wait", 8)):
        cells = []
        for backend in ("agents", "slurm"):
            values = [row[index] for row in rows[backend] if row[index] == row[index]] or [float("nan")]
            cells.append((statistics.median(values), percentile(values, 90)))
        ratio = cells[1][0] / cells[0][0] if cells[0][0] else float("nan")
        print(f"   {label:<28}{cells[0][0]:>8.3f} ({cells[0][1]:.3f}){cells[1][0]:>8.3f} ({cells[1][1]:.3f}){ratio:>15.1f}×")


def max_gpus_per_node(intervals: dict[str, list[tuple[float, float, int]]]) -> dict[str, int]:
    """The most GPUs any node held at once, from [start, end) intervals (Slurm's own records)."""
    peaks = {}
    for node, spans in intervals.items():
        events = sorted([(start, gpus) for start, _, gpus in spans] + [(end, -gpus) for _, end, gpus in spans],
                        key=lambda e: (e[0], e[1]))  # ends before starts at the same second
        held = peak = 0
        for _, delta in events:
            held += delta
            peak = max(peak, held)
        peaks[node] = peak
    return peaks


def part_two(stack: BenchStack, token: str, slurm, count: int, drained: float = 0.0) -> None:
    from jobs.models import TrainingJob
    from jobs.slurm import jobcomp
    from jobs.slurm.models import SlurmJob

    shapes = [SHAPES[i % len(SHAPES)] for i in range(count)]
    if drained:
        slurm.scontrol("update", "nodename=n1", "state=drain", "reason=bench")  # maintenance while the jobs queue
    began = time.perf_counter()
    ids = [post_json(f"{stack.url}/api/v1/training-jobs/", token,
                          job_payload(f"drain-{i}", "g3", "echo drained; sleep 1", nodes, gpus))["id"]
           for i, (nodes, gpus) in enumerate(shapes)]
    queued = time.perf_counter() - began
    if drained:
        time.sleep(max(0.0, drained - queued))
        waiting = TrainingJob.objects.filter(pk__in=ids, status="Pending").count()
        failed_early = TrainingJob.objects.filter(pk__in=ids, status="Failed").count()
        slurm.scontrol("update", "nodename=n1", "state=resume")
        resumed = time.perf_counter()
        print(f"\n   n1 drained for {resumed - began:.1f} s while they queued: {waiting} Pending, {failed_early} Failed "
              "when it resumed")
    done = wait_for(lambda: (n := TrainingJob.objects.filter(pk__in=ids, status__in=["Completed", "Failed"]).count()) == count and n,
                    timeout=3600, interval=0.5)
    wall = time.perf_counter() - began
    if drained:
        print(f"   after the resume, all ended in {time.perf_counter() - resumed:.1f} s")
    failures = list(TrainingJob.objects.filter(pk__in=ids, status="Failed").values_list("name", "status_reason"))
    failed = len(failures)
    for name, reason in failures[:5]:
        print(f"   failed: {name}: {reason}")
    print_leftovers(slurm, ids)
    shape_of = {job_id: shape for job_id, shape in zip(ids, shapes, strict=True)}
    slurm_ids = dict(SlurmJob.objects.filter(training_job_id__in=ids).values_list("slurm_job_id", "training_job_id"))
    records = jobcomp.read(str(slurm.jobcomp), list(slurm_ids))
    intervals: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    gpu_seconds = 0.0
    for slurm_id, runs in records.items():
        _, gpus = shape_of[slurm_ids[slurm_id]]
        for record in runs:
            for node in record.nodes:
                intervals[node].append((record.start.timestamp(), record.end.timestamp(), gpus))
                gpu_seconds += (record.end - record.start).total_seconds() * gpus
    peaks = max_gpus_per_node(intervals)
    gangs = sum(1 for nodes, _ in shapes if nodes == 2)
    print(f"\n2. {count} jobs queued at once on Slurm (shapes nodes×GPUs cycled: {', '.join(f'{n}×{g}' for n, g in SHAPES)}; "
          f"{gangs} two-node gangs), 2 nodes × 8 GPUs")
    print(f"   queued through the API in {queued:.1f} s; all {done} ended after {wall:.1f} s "
          f"({count / wall * 60:.0f} jobs/min), {failed} failed")
    print("   most GPUs held at once (Slurm's completion records): "
          + ", ".join(f"{node} {peak} of {slurm.gpus_per_node}" for node, peak in sorted(peaks.items())))
    print(f"   GPU occupancy over the drain: {gpu_seconds / (wall * slurm.gpus_per_node * len(slurm.nodes)):.0%} "
          f"({gpu_seconds / 3600:.2f} GPU-hours held in {wall:.0f} s)")


def print_leftovers(slurm: Any, ids: list[int]) -> None:
    """What a drain must not leave: jobs Slurm still holds (strays), Slurm jobs the console still
    follows, and runs beyond one per job (a requeue nobody asked for)."""
    from django.db.models import Count

    from jobs.models import TrainingJob
    from jobs.slurm.models import SlurmJob, SlurmRun
    from jobs.slurm.states import FINAL_STATES

    time.sleep(3)  # a pass after the last end
    alive = [view for view in slurm.client().jobs() if view.state not in FINAL_STATES]
    following = SlurmJob.objects.filter(training_job_id__in=ids, finished_at__isnull=True).count()
    runs = SlurmRun.objects.filter(slurm_job__training_job_id__in=ids).values("slurm_job").annotate(n=Count("id"))
    extra = sum(row["n"] - 1 for row in runs if row["n"] > 1)
    completed = TrainingJob.objects.filter(pk__in=ids, status="Completed").count()
    print(f"   {completed} of {len(ids)} Completed; left in Slurm (strays): {len(alive)}; Slurm jobs still followed: "
          f"{following}; runs beyond one per job: {extra}")


def trace(slurm: Any) -> None:
    from benchmarks.slurm_trace import console_events, print_trace, slurm_events
    from jobs.slurm.models import SlurmJob

    for backend, (job_id, wall) in TRACES.items():
        events = console_events(job_id)
        slurm_id = SlurmJob.objects.filter(training_job_id=job_id).values_list("slurm_job_id", flat=True).first()
        if slurm_id:
            events += slurm_events(slurm.root, slurm_id)
        print_trace(f"{backend}: job {job_id}, seconds from the API call", wall, events)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--drain", type=int, default=200)
    parser.add_argument("--drained", type=float, default=0.0,
                        help="drain n1 while the jobs of part 2 are queued; resume it after this many seconds")
    parser.add_argument("--trace", action="store_true", help="print the last run's events of each backend on one time line")
    args = parser.parse_args()
    from jobs.slurm.tests.cluster import LocalSlurm

    slurm = LocalSlurm().start()
    try:
        with BenchStack() as stack:
            from jobs.slurm.tests.cluster import register

            _, token = api_user()
            register(slurm, stack.url, gpu_metrics="off", metrics_interval_seconds=0)
            stack.start_agents(["bench-a", "bench-b"], timeout=60)
            part_one(stack, token, args.runs, slurm.root)
            if args.trace:
                trace(slurm)
            # the batch jobs' output (the launchers' own timestamped log) outlives the cluster's directory
            for out in slurm.work_dir.glob("slurm-*.out"):
                shutil.copy(out, stack.tmp)
            if args.drain:
                part_two(stack, token, slurm, args.drain, args.drained)
    finally:
        slurm.stop()


if __name__ == "__main__":
    main()
