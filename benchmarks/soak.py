"""Soak a running `make run` the way a shared cluster lives. Prints figures; asserts nothing.

Run `make run > run.log 2>&1` in one terminal, then
`.venv/bin/python -m benchmarks.soak --minutes 25 --log run.log` in another (same checkout, so it
finds the private database). Three users create jobs through the REST API for `--minutes`:
on-demand and spot, 1–2 nodes × 1–8 GPUs, some with Job Failover; some are deleted while they
run; staff inject XID 79 into nodes that run failover jobs and uncordon a node a minute after
its fault (the repair), as the node page's Uncordon button does. At the end it prints the jobs' final
statuses, every HTTP status the API answered, and what `make run`'s log holds of errors
("database is locked", tracebacks, 1011 closes, HTTP 500).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import time
import urllib.error
import urllib.request
from pathlib import Path


def setup_users() -> dict[str, str]:
    """API tokens of alice, bob, carol and a staff user, made in the console's database."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    tokens = {}
    for name in ("alice", "bob", "carol", "soak-staff"):
        user, _ = get_user_model().objects.get_or_create(username=name, defaults={"is_staff": name == "soak-staff"})
        tokens[name] = Token.objects.get_or_create(user=user)[0].key
    return tokens


class Api:
    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")
        self.statuses: collections.Counter[str] = collections.Counter()
        self.refusals: collections.Counter[str] = collections.Counter()  # what 4xx answers said

    def call(self, token: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        request = urllib.request.Request(
            self.base + path, method=method, data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                code, text = response.status, response.read()
        except urllib.error.HTTPError as error:
            code, text = error.code, error.read()
        self.statuses[f"{method} {re.sub(r'/[0-9]+/', '/{id}/', path)} {code}"] += 1
        if code in (400, 409, 429):
            self.refusals[text.decode(errors="replace")[:200]] += 1
        try:
            return code, json.loads(text or b"{}")
        except ValueError:
            return code, {}


def job_body(rng: random.Random, n: int) -> dict:
    spot = rng.random() < 0.3
    gpus = rng.choice([1, 2, 4, 8])
    return {
        "name": f"soak-{n}-{rng.randrange(10**6)}", "learning_type": "spot" if spot else "on_demand",
        "framework": "pytorch", "framework_version": "2.13.0", "failover_enabled": (not spot) and rng.random() < 0.5,
        "server_type": "g2", "gpus_per_node": gpus, "memory_gb": 256 * gpus, "node_count": rng.choice([1, 1, 2]),
        "shm_size_gb": 8, "image_url": "registry.example.com/trainer:1", "keep_alive_minutes": rng.choice([0, 10]),
        "command": f"for i in $(seq 1 {rng.randint(3, 60)}); do echo step $i; sleep 1; done", "tags": [],
    }


def repair(faulted: dict[int, float], now: float, after: float = 60) -> None:
    """Staff uncordon each node whose fault is `after` seconds old (jobs.actions.set_cordon)."""
    from jobs import actions

    for node_id, at in list(faulted.items()):
        if now - at >= after:
            actions.set_cordon(node_id, False)
            del faulted[node_id]


def soak(api: Api, tokens: dict[str, str], minutes: float, seed: int) -> dict[int, str]:
    rng = random.Random(seed)
    created: dict[int, str] = {}
    faulted: dict[int, float] = {}
    from jobs import actions
    from jobs.models import Node

    for node_id in Node.objects.filter(cordoned=True).values_list("pk", flat=True):  # repaired since the last session
        actions.set_cordon(node_id, False)
    deadline = time.monotonic() + minutes * 60
    n = 0
    while time.monotonic() < deadline:
        user = rng.choice(["alice", "bob", "carol"])
        code, job = api.call(tokens[user], "POST", "/api/v1/training-jobs/", job_body(rng, n))
        n += 1
        if code == 201:
            created[job["id"]] = user
        if created and rng.random() < 0.1:  # a user deletes one of their jobs, running or not
            job_id = rng.choice(list(created))
            api.call(tokens[created[job_id]], "DELETE", f"/api/v1/training-jobs/{job_id}/")
        if rng.random() < 0.05:  # staff inject a hardware fault where a failover job runs
            _, nodes = api.call(tokens["soak-staff"], "GET", "/api/v1/nodes/")
            busy = [node for node in nodes.get("results", nodes if isinstance(nodes, list) else [])
                    if any(g.get("held_by") == "job" for g in node.get("gpus", []))]
            if busy:
                node = rng.choice(busy)
                gpu = next(g["index"] for g in node["gpus"] if g.get("held_by") == "job")
                api.call(tokens["soak-staff"], "POST", f"/api/v1/nodes/{node['id']}/inject-fault/",
                         {"kind": "xid", "xid": 79, "gpu_index": gpu})
                faulted.setdefault(node["id"], time.monotonic())
        repair(faulted, time.monotonic())
        time.sleep(rng.uniform(2, 8))
    return created


def final_statuses(api: Api, tokens: dict[str, str], created: dict[int, str]) -> collections.Counter[str]:
    statuses: collections.Counter[str] = collections.Counter()
    for job_id, user in created.items():
        code, job = api.call(tokens[user], "GET", f"/api/v1/training-jobs/{job_id}/")
        statuses["(deleted)" if code == 404 else job.get("status", f"HTTP {code}")] += 1
    return statuses


def log_errors(log: Path) -> collections.Counter[str]:
    patterns = {
        "database is locked": r"database is locked", "Traceback": r"^Traceback", "HTTP 500": r'" 500 |status_code=500',
        "WebSocket 1011": r"1011", "ERROR lines": r"\bERROR\b",
    }
    text = log.read_text(errors="replace") if log.exists() else ""
    return collections.Counter({name: len(re.findall(p, text, re.MULTILINE)) for name, p in patterns.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--minutes", type=float, default=25)
    parser.add_argument("--log", type=Path, default=None, help="make run's output, to count errors in")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    tokens = setup_users()
    api = Api(args.url)
    started = time.monotonic()
    created = soak(api, tokens, args.minutes, args.seed)
    time.sleep(90)  # let the last jobs finish
    print(f"soaked {(time.monotonic() - started) / 60:.1f} minutes; {len(created)} jobs created")
    print("final statuses:", dict(final_statuses(api, tokens, created)))
    print("API answers:")
    for key, count in sorted(api.statuses.items()):
        print(f"  {key}: {count}")
    server_errors = sum(c for k, c in api.statuses.items() if k.rsplit(" ", 1)[1].startswith("5"))
    print(f"HTTP 5xx answers: {server_errors}")
    for text, count in api.refusals.most_common(5):
        print(f"  refused {count}×: {text}")
    if args.log:
        print("make run log:", dict(log_errors(args.log)))


if __name__ == "__main__":
    main()
