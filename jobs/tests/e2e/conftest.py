"""Fixtures of the end-to-end tests: a real console (daphne), Celery, SeaweedFS and node agents."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from django.conf import settings

from jobs.models import NodeToken

from . import containers, environments
from .stack import Stack, database_url, wait_until

# the Docker runtime's fixtures: Podman + a private registry, and the agents' runtime switch
container_host = containers.container_host
runtime = containers.runtime
# the seeded training environments, built once per machine into the agents' shared cache
env_cache = environments.env_cache

SCRIPTS = Path(__file__).parent / "scripts"
SCRIPT_BUCKET = "e2e-scripts"


@pytest.fixture(scope="module")
def stack(request, django_db_setup, django_db_blocker, object_store, tmp_path_factory, env_cache):
    """daphne + Celery worker + beat on the test database, for the tests of one module (a module
    may set CONSOLE_PROCESSES = 2 for two daphne processes sharing the port)."""
    env = {
        **os.environ,
        **object_store.env(),
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "CHANNELS_PREFIX": settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"],
        # the agents fence themselves after 60 % of this: long enough to ride out a console restart
        "NODE_LOST_AFTER_SECONDS": "20",
        "JOB_STOP_GRACE_SECONDS": "5",
        "SCHEDULER_TICK_SECONDS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    running = Stack(env=env, log_dir=tmp_path_factory.mktemp("stack"), env_cache=env_cache,
                    console_processes=getattr(request.module, "CONSOLE_PROCESSES", 1))
    from console.celery import app
    from jobs import notify

    app.control.purge()  # tasks queued by earlier unit tests name rows that no longer exist
    # a purged scheduler run leaves its request flag set: no tick would ask for a run until it expired
    notify.schedule_request_taken()
    running.start_console()
    running.start_workers()
    yield running
    running.stop()


@pytest.fixture
def e2e_settings(object_storage_settings):
    """The test process reads and writes the same object storage as the stack."""
    return object_storage_settings


@pytest.fixture
def start_nodes(stack, transactional_db, runtime):
    """Start N agents with simulated GPUs (in the test's `runtime`) and wait until each one is connected."""
    from jobs.models import Node

    def start(*names: str, gpus: str = "simulated:8", server_type: str = "g2"):
        agents = []
        for name in names:
            _, token = NodeToken.mint(name)
            agents.append(stack.agent(name, token, gpus=gpus, server_type=server_type, extra=runtime.agent_args, env=runtime.agent_env))
        wait_until(
            lambda: Node.objects.filter(name__in=names, connected=True).count() == len(names),
            timeout=30, message=f"nodes {names} to connect",
        )
        return agents

    yield start
    for agent in stack.agents:
        agent.stop()
    stack.agents.clear()


@pytest.fixture
def upload_script(object_store):
    """Upload one of ./scripts to object storage; returns its s3:// URL."""
    client = object_store.client()
    with contextlib.suppress(Exception):  # it exists already (SeaweedFS answers either error)
        client.create_bucket(Bucket=SCRIPT_BUCKET)

    def upload(name: str) -> str:
        client.upload_file(str(SCRIPTS / name), SCRIPT_BUCKET, name)
        return f"s3://{SCRIPT_BUCKET}/{name}"

    return upload


@pytest.fixture
def training_script(upload_script) -> str:
    """The DDP training script, uploaded to object storage; returns its s3:// URL."""
    return upload_script("train_ddp.py")


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        stack = item.funcargs.get("stack")
        if stack is not None:
            report.sections.append(("stack logs", stack.logs()))
        host = item.funcargs.get("container_host") or getattr(item.funcargs.get("runtime"), "host", None)
        if host is not None:
            report.sections.append(("podman and registry logs", host.logs()))
