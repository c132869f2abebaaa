"""Failover recovery time: fault injected → first training step after resume. Printed, not asserted.

Run: `.venv/bin/python -m benchmarks.recovery [--runs 3]`. A real console, Celery, SeaweedFS and
three node agents with simulated GPUs; a 1-node job trains with the concurrent checkpointing
library (checkpoint every 5 steps, mirrored to S3); XID 79 is injected on its GPU, and the
job fails over to another node. Breakdown, from the history rows and the log lines:
detection (fault → Pending - failoverinprogress), reallocation (→ Creating), restart
(→ Running: environment prepared, command started), checkpoint load (→ first step logged),
and the work lost (steps redone after the resume).
"""

from __future__ import annotations

import argparse
import re
import statistics
import time

from benchmarks._stack import ROOT, BenchStack, job_fields
from benchmarks._stack import wait_for as _wait_for

SCRIPT = ROOT / "jobs" / "tests" / "e2e" / "scripts" / "train_ckpt.py"


def wait_for(predicate, timeout: float = 120.0, interval: float = 0.05):
    return _wait_for(predicate, timeout=timeout, interval=interval)


def one_run(run: int, owner, stack, script_url: str) -> dict:
    from jobs import actions
    from jobs.models import JobAttempt, Node, TrainingJob
    from jobs.nodes import hardware
    from monitoring.models import LogLine

    job = actions.create_job(owner, job_fields(
        f"recover-{run}", failover_enabled=True, gpus_per_node=1, memory_gb=256, shm_size_gb=8, script_url=script_url,
        command="PYTHONPATH=$CHECKPOINT_VENDOR torchrun train_ckpt.py --steps 400 --every 5 --sleep 0.1",
    ), [])
    wait_for(lambda: (TrainingJob.objects.get(pk=job.pk).checkpoint_step or 0) >= 10)
    placement = JobAttempt.objects.get(job=job, number=1).placements.get()
    injected = time.time()
    hardware.inject_fault(placement.node_id, "xid", placement.gpu_indices[0], 79)
    try:
        wait_for(lambda: TrainingJob.objects.get(pk=job.pk).current_attempt == 2 and
                 TrainingJob.objects.get(pk=job.pk).status == "Running")
    except TimeoutError:
        current = TrainingJob.objects.get(pk=job.pk)
        print(run, current.status, current.status_reason, current.current_attempt)
        print([(n.name, n.cordoned, n.connected) for n in Node.objects.all()])
        raise

    def first_step():
        line = LogLine.objects.filter(job=job, attempt=2, text__regex=r"^step \d+ loss").order_by("seq").first()
        return line

    try:
        line = wait_for(first_step)
    except TimeoutError:
        for text in LogLine.objects.filter(job=job).order_by("attempt", "seq").values_list("attempt", "text"):
            print(text)
        print(TrainingJob.objects.get(pk=job.pk).status, TrainingJob.objects.get(pk=job.pk).status_reason)
        listing = stack.store.client().list_objects_v2(Bucket=f"simpleai-u{owner.pk}", Prefix=f"jobs/{job.pk}/checkpoints/")
        print([o["Key"] for o in listing.get("Contents", [])])
        raise
    changes = {c.new_status: c.created_at.timestamp() for c in TrainingJob.objects.get(pk=job.pk).status_changes.order_by("id")}
    resumed = JobAttempt.objects.get(job=job, number=2)
    steps_1 = [int(m.group(1)) for t in LogLine.objects.filter(job=job, attempt=1).values_list("text", flat=True)
               if (m := re.match(r"step (\d+) loss", t))]
    history = list(TrainingJob.objects.get(pk=job.pk).status_changes.order_by("id"))
    creating_2 = [c.created_at.timestamp() for c in history if c.new_status == "Creating"][-1]
    running_2 = [c.created_at.timestamp() for c in history if c.new_status == "Running"][-1]
    actions.delete_job(job.pk)
    wait_for(lambda: not TrainingJob.objects.filter(pk=job.pk).exists())
    Node.objects.update(cordoned=False, cordon_reason="")
    from jobs.models import NodeGPU

    NodeGPU.objects.update(healthy=True)
    return {
        "detection": changes["Pending - failoverinprogress"] - injected,
        "reallocation": creating_2 - changes["Pending - failoverinprogress"],
        "restart": running_2 - creating_2,
        "checkpoint load": line.ts.timestamp() - running_2,
        "total": line.ts.timestamp() - injected,
        "steps redone": max(steps_1) - resumed.resume_step,
        "resumed from": resumed.resume_step,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with BenchStack() as stack:
        from django.contrib.auth import get_user_model

        owner = get_user_model().objects.create_user("bench")
        script_url = stack.upload_as(owner, "uploads/train_ckpt.py", SCRIPT)  # the owner's own space and keys
        stack.start_agents(["bench-a", "bench-b", "bench-c"])
        rows = [one_run(run, owner, stack, script_url) for run in range(args.runs)]
    print(f"\nFailover recovery, {args.runs} runs, XID 79 on a 1-node job (checkpoint every 5 steps, 0.1 s a step)")
    for key in ("detection", "reallocation", "restart", "checkpoint load", "total"):
        values = [row[key] for row in rows]
        print(f"  {key:<16} median {statistics.median(values):6.2f} s   max {max(values):6.2f} s")
    redone = [row["steps redone"] for row in rows]
    print(f"  steps redone     median {statistics.median(redone):.0f}   max {max(redone)} (checkpoint interval: 5 steps)")


if __name__ == "__main__":
    main()
