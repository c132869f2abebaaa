"""Job start latency: create (API) → first log line, on idle nodes. Prints figures; asserts nothing.

Run: `.venv/bin/python benchmarks/job_start.py [--runs 7]`. A real daphne, Celery worker and
beat, SeaweedFS and two node agents; each run creates a job through the REST API and times:
scheduled (status Creating), the agent's first preparation line, and the command's first line.
"""

from __future__ import annotations

import argparse
import statistics
import time

import requests_shim as http
from _stack import BenchStack, percentile


def wait_for(predicate, timeout: float = 30.0):
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.005)
    raise TimeoutError("timed out")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with BenchStack() as stack:
        from django.contrib.auth import get_user_model
        from rest_framework.authtoken.models import Token

        from jobs.models import Node, NodeToken, TrainingJob
        from monitoring.models import LogLine

        user = get_user_model().objects.create_user("bench")
        token = Token.objects.create(user=user).key
        for name in ("bench-a", "bench-b"):
            stack.agent(name, NodeToken.mint(name)[1])
        wait_for(lambda: Node.objects.filter(connected=True).count() == 2)
        rows = []
        for run in range(args.runs):
            began = time.perf_counter()
            job_id = http.post_json(f"{stack.url}/api/v1/training-jobs/", token, {
                "name": f"start-{run}", "learning_type": "on_demand", "framework": "pytorch",
                "server_type": "g2", "gpus_per_node": 8, "memory_gb": 2048, "node_count": 1, "shm_size_gb": 64,
                "image_url": "trainer:1", "command": f"echo first-line-{run}",
            })["id"]
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
