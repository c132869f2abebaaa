"""Training rides out an outage of everything on the console's side, for real.

daphne stopped, its Redis stopped (a private one, so nothing else on the machine is touched)
and its PostgreSQL database refusing connections, all at once for E2E_OUTAGE_SECONDS (default
125): the agent keeps its job running and spools, nothing is lost or stored twice, the node is
never declared Lost and the job never fails over. Before, an outage of about 18 s of Redis or
PostgreSQL stopped every running job (the agents fenced themselves) and the watchdog then
declared the nodes Lost from stale heartbeats.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from console.services.ports import free_port, wait_for_port
from console.services.redis_server import redis_binary
from jobs.models import JobAttempt, Node, NodeToken
from monitoring.models import LogLine

from .helpers import DatabaseGate, create_job, wait_for_status
from .stack import Stack, database_url, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

OUTAGE_SECONDS = float(os.environ.get("E2E_OUTAGE_SECONDS", "125"))


class PrivateRedis:
    """A redis-server of this test alone, stopped and started again on the same port."""

    def __init__(self, directory) -> None:
        self.directory, self.port = directory, free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [redis_binary(), "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
        )
        wait_for_port(self.port, timeout=15)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=15)


@pytest.fixture(scope="module")
def outage_stack(django_db_setup, django_db_blocker, object_store, tmp_path_factory, env_cache):
    """A console of its own (daphne, Celery worker and beat) on a private Redis."""
    redis = PrivateRedis(tmp_path_factory.mktemp("redis"))
    redis.start()
    env = {
        **os.environ, **object_store.env(), "DJANGO_SETTINGS_MODULE": "console.settings",
        "DATABASE_URL": database_url(), "REDIS_URL": redis.url, "CHANNELS_PREFIX": "simpleai-outage",
        "NODE_LOST_AFTER_SECONDS": "20", "JOB_STOP_GRACE_SECONDS": "5", "SCHEDULER_TICK_SECONDS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    # the machine's built environments: a job that first builds one would not be Running in time
    stack = Stack(env=env, log_dir=tmp_path_factory.mktemp("outage-stack"), env_cache=env_cache)
    stack.start_console()
    stack.start_workers()
    yield stack, redis
    stack.stop()
    redis.stop()


@pytest.mark.duration(160)
def test_training_rides_out_a_two_minute_outage_of_the_console_its_redis_and_its_database(alice, outage_stack):
    stack, redis = outage_stack
    _, token = NodeToken.mint("steady-1")
    agent = stack.agent("steady-1", token)
    wait_until(lambda: Node.objects.filter(name="steady-1", connected=True).exists(), timeout=30, message="the node")
    steps = int(OUTAGE_SECONDS) + 30
    job = create_job(alice, "steady", f"for i in $(seq 1 {steps}); do echo step $i; sleep 1; done")
    wait_for_status(job.pk, "Running", timeout=60)
    wait_until(lambda: LogLine.objects.filter(job=job, text="step 3").exists(), timeout=30, message="step 3")

    gate = DatabaseGate()
    stack.stop_console()
    redis.stop()
    gate.close([process.pid for process in stack.processes.values()] + [agent.process.pid])
    try:
        time.sleep(OUTAGE_SECONDS)
    finally:
        gate.open()
        redis.start()
        stack.start_console()

    job = wait_for_status(job.pk, "Completed", "Failed", "Pending - failoverinprogress", timeout=steps + 90)
    assert job.status == "Completed", job.status_reason
    texts = list(LogLine.objects.filter(job=job, attempt=1, stream="master", text__startswith="step ").values_list("text", flat=True))
    assert sorted(texts, key=lambda t: int(t.split()[1])) == [f"step {i}" for i in range(1, steps + 1)]  # each once
    assert JobAttempt.objects.filter(job=job).count() == 1
    assert list(job.status_changes.values_list("new_status", flat=True)) == ["Pending", "Creating", "Running", "Completed"]
    assert not Node.objects.get(name="steady-1").lost
    assert "fencing" not in agent.output()
