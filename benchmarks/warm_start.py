"""Job start latency, cold vs warm: create (API) → first log line. Prints figures; asserts nothing.

Run: `.venv/bin/python -m benchmarks.warm_start [--runs 5] [--size-mb 256]`. A real daphne, Celery
worker and beat, SeaweedFS and one node agent. Each round creates two jobs of the same user
through the REST API:

- cold: a new image tag, so nothing is warm: the agent really prepares, i.e. downloads the
  job's `--size-mb` data file from SeaweedFS (and keeps it for the warm pool);
- warm: the same image and file right after the cold job ended: placed on the warm node, the
  agent links the kept environment instead of preparing.

Times, from the API call: scheduled (Creating), the agent's first line, and the command's first
line (what a user waits for). The data file is a stand-in for what real preparation moves (an
image pull, a dataset); over a real network the gap only grows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from benchmarks._stack import BenchStack, api_job, api_user, percentile, post_json
from benchmarks._stack import wait_for as _wait_for


def wait_for(predicate, timeout: float = 120.0):
    return _wait_for(predicate, timeout=timeout)


def upload(stack: BenchStack, user, size_mb: int) -> str:
    path = stack.tmp / "dataset.bin"
    with open(path, "wb") as file:
        for _ in range(size_mb):
            file.write(os.urandom(1 << 20))
    return stack.upload_as(user, "uploads/dataset.bin", path)  # the user's own space and keys


def start_job(stack: BenchStack, token: str, name: str, image: str, data_url: str) -> tuple[float, ...]:
    from jobs.models import TrainingJob
    from monitoring.models import LogLine

    began = time.perf_counter()
    job_id = post_json(f"{stack.url}/api/v1/training-jobs/", token, api_job(
        name, image_url=image, script_url=data_url, command=f"echo first-line-{name}; test -s dataset.bin"))["id"]
    wait_for(lambda: TrainingJob.objects.filter(pk=job_id).exclude(status="Pending").exists())
    scheduled = time.perf_counter()
    wait_for(lambda: LogLine.objects.filter(job_id=job_id).exists())
    first_line = time.perf_counter()
    wait_for(lambda: LogLine.objects.filter(job_id=job_id, text=f"first-line-{name}").exists())
    command_line = time.perf_counter()
    job = wait_for(lambda: TrainingJob.objects.filter(pk=job_id, status__in=["Completed", "Failed"]).first())
    if job.status != "Completed":
        raise RuntimeError(f"job {name} ended {job.status}: {job.status_reason}")
    return scheduled - began, first_line - began, command_line - began, job.started_warm, job.warm_note


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--size-mb", type=int, default=256, help="the data file the cold start downloads")
    args = parser.parse_args()
    cold, warm = [], []
    with BenchStack() as stack:
        user, token = api_user()
        data_url = upload(stack, user, args.size_mb)
        stack.start_agents(["bench-a"])
        for run in range(args.runs):
            image = f"registry.example.com/bench/trainer:cold-{run}"  # a new image: nothing is warm for it
            cold.append(start_job(stack, token, f"cold-{run}", image, data_url))
            warm.append(start_job(stack, token, f"warm-{run}", image, data_url))
            if not warm[-1][3]:
                raise RuntimeError(f"warm-{run} did not start warm: {warm[-1][4]}")
            time.sleep(0.3)
    print(f"\nJob start latency, cold vs warm: {args.runs} runs each, one local node, "
          f"a {args.size_mb} MB data file to prepare (seconds from the API call)")
    print(f"  {'':<22} {'cold median':>12} {'warm median':>12} {'cold/warm':>10}   {'warm p90':>8} {'warm max':>8}")
    for label, index in (("scheduled (Creating)", 0), ("first log line", 1), ("command's first line", 2)):
        c, w = [row[index] for row in cold], [row[index] for row in warm]
        print(f"  {label:<22} {statistics.median(c):>12.3f} {statistics.median(w):>12.3f} "
              f"{statistics.median(c) / statistics.median(w):>9.1f}×   {percentile(w, 90):>8.3f} {max(w):>8.3f}")
    print(f"  warm note of the last run: {warm[-1][4]}")


if __name__ == "__main__":
    main()
