"""A Celery worker started the ordinary way serves every queue the console routes tasks to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from django.conf import settings

from console.celery import app


def test_every_routed_queue_is_declared():
    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    assert routed <= set(app.amqp.queues), f"routed to undeclared queues: {routed - set(app.amqp.queues)}"


@pytest.mark.slow
def test_it_serves_the_watchdog_queue_without_being_told_to():
    """`celery -A console worker` with no -Q: the queue of node liveness and failover
    assessments is consumed (before, only `make run`'s worker named it, and a console deployed
    as any Celery deployment starts it never noticed a dead node)."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "console.settings"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "console", "worker", "-P", "solo", "-n", f"plain-{os.getpid()}@%h",
         "--without-mingle", "--without-gossip", "-l", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        queues: set[str] = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not queues:
            inspect = subprocess.run(
                [sys.executable, "-m", "celery", "-A", "console", "inspect", "active_queues", "--json", "--timeout", "2",
                 "-d", f"plain-{os.getpid()}@{os.uname().nodename}"],
                env=env, capture_output=True, text=True,
            )
            for line in inspect.stdout.splitlines():
                if line.startswith("{"):
                    for consumed in json.loads(line).values():
                        queues |= {queue["name"] for queue in consumed}
        exited = worker.poll() is not None  # say why the worker never answered (CI keeps only this)
        said = worker.stderr.read().decode(errors="replace")[-2000:] if exited and worker.stderr else ""
        assert {"celery", "watchdog"} <= queues, (f"a plain worker consumes {sorted(queues)}"
                                                  + (f"; it exited with {worker.returncode}: {said}" if exited else ""))
    finally:
        worker.terminate()
        worker.wait(timeout=30)
