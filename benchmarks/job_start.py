"""Job start latency: create (API) → first log line, on idle nodes. Prints figures; asserts nothing.

Run: `.venv/bin/python -m benchmarks.job_start [--runs 7]`. A real daphne, Celery worker and
beat, SeaweedFS and two node agents; each run creates a job through the REST API and times:
scheduled (status Creating), the agent's first preparation line, and the command's first line.
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks._stack import BenchStack, api_job, api_user, percentile, post_json, wait_for


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with BenchStack() as stack:
        from jobs.models import TrainingJob
        from monitoring.models import LogLine

        _, token = api_user()
        stack.start_agents(["bench-a", "bench-b"], timeout=30)
        rows = []
        for run in range(args.runs):
            began = time.perf_counter()
            job_id = post_json(f"{stack.url}/api/v1/training-jobs/", token,
                               api_job(f"start-{run}", command=f"echo first-line-{run}"))["id"]
            created = time.perf_counter()
            wait_for(lambda job_id=job_id: TrainingJob.objects.filter(pk=job_id).exclude(status="Pending").exists())
            scheduled = time.perf_counter()
            wait_for(lambda job_id=job_id: LogLine.objects.filter(job_id=job_id).exists())
            first_line = time.perf_counter()
            wait_for(lambda job_id=job_id, run=run: LogLine.objects.filter(job_id=job_id, text=f"first-line-{run}").exists())
            command_line = time.perf_counter()
            wait_for(lambda job_id=job_id: TrainingJob.objects.filter(pk=job_id, status="Completed").exists())
            rows.append((created - began, scheduled - began, first_line - began, command_line - began))
            time.sleep(0.5)
    print(f"\nJob start latency, {args.runs} runs on idle local nodes (seconds from the API call)")
    for label, index in (("API answered", 0), ("scheduled (Creating)", 1), ("first log line", 2), ("command's first line", 3)):
        values = [row[index] for row in rows]
        print(f"  {label:<22} median {statistics.median(values):.3f}  p90 {percentile(values, 90):.3f}  max {max(values):.3f}")


if __name__ == "__main__":
    main()
