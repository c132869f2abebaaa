"""A job created while Redis is down: the API answers 201 (the job is saved, so a client has no
reason to retry), and the job is scheduled once Redis is back, by the scheduler's periodic tick.

Redis is stopped for real: the console, worker and beat of this module use a private
redis-server (the shared one serves other test runs), stopped and started on the same port.
"""

from __future__ import annotations

import os
import time
from urllib.parse import urlparse

import pytest
import requests
from django.conf import settings
from rest_framework.authtoken.models import Token

from console.services.redis_server import start_private_redis
from jobs.models import Node, NodeToken, TrainingJob
from jobs.tests.factories import api_payload

from .helpers import wait_for_status
from .stack import Stack, database_url, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def redis_stack(django_db_setup, object_store, tmp_path, env_cache):
    """daphne + Celery worker + beat + one agent, all on a private Redis the test may stop."""
    run_dir = tmp_path / "redis"
    url, process = start_private_redis(run_dir)
    env = {
        **os.environ, **object_store.env(),
        "DJANGO_SETTINGS_MODULE": "console.settings", "DATABASE_URL": database_url(),
        "REDIS_URL": url, "CHANNELS_PREFIX": "redis-outage",
        "NODE_LOST_AFTER_SECONDS": "60", "SCHEDULER_TICK_SECONDS": "1", "PYTHONUNBUFFERED": "1",
    }
    stack = Stack(env=env, log_dir=tmp_path / "stack", env_cache=env_cache)  # the machine's built environments
    stack.log_dir.mkdir()
    stack.start_console()
    stack.start_workers()
    redis = {"url": url, "process": process, "dir": run_dir}
    yield stack, redis
    stack.stop()
    redis["process"].terminate()
    redis["process"].wait(10)


def test_a_job_posted_while_redis_is_down_is_saved_and_scheduled_when_it_returns(alice, redis_stack):
    stack, redis = redis_stack
    _, node_token = NodeToken.mint("node-r")
    stack.agent("node-r", node_token)
    wait_until(lambda: Node.objects.filter(name="node-r", connected=True).exists(), timeout=30,
               message="the agent to connect")
    api = requests.Session()
    api.headers["Authorization"] = f"Token {Token.objects.create(user=alice).key}"
    url = f"{stack.url}/api/v1/training-jobs/"
    payload = api_payload(name="posted-in-outage", image_url="127.0.0.1:5055/team/trainer:1", command="echo after the outage")

    redis["process"].terminate()
    redis["process"].wait(10)
    began = time.monotonic()
    response = api.post(url, json=payload, timeout=60)
    answered_in = time.monotonic() - began

    assert response.status_code == 201, response.text[:500]
    job = TrainingJob.objects.get(pk=response.json()["id"])
    assert job.status == "Pending"
    # the client has its answer; a retry is not needed (and would be a duplicate)
    assert api.post(url, json=payload, timeout=60).status_code == 400
    assert TrainingJob.objects.filter(name="posted-in-outage").count() == 1

    time.sleep(3)  # down a little longer: the tick keeps failing to reach the broker meanwhile
    _, redis["process"] = start_private_redis(redis["dir"], port=urlparse(redis["url"]).port)
    job = wait_for_status(job.pk, "Completed", "Failed", timeout=120)
    assert job.status == "Completed", job.status_reason
    print(f"\nPOST during the outage answered 201 in {answered_in:.2f} s")
    assert redis["url"] != settings.REDIS_URL  # the shared Redis of other test runs was never touched
