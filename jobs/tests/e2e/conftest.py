"""Fixtures of the end-to-end tests: a real console (daphne), Celery, SeaweedFS and node agents."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from django.conf import settings

from jobs.models import NodeToken
from jobs.tests.storage import forget_identities, space_client

from . import containers, environments
from .secured import SecuredServices, start_secured_services
from .stack import Stack, console_env, database_url, wait_until

# the Docker runtime's fixtures: Podman + a private registry, and the agents' runtime switch
container_host = containers.container_host
runtime = containers.runtime
# the seeded training environments, built once per machine into the agents' shared cache
env_cache = environments.env_cache

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture(scope="module")
def stack(request, django_db_setup, django_db_blocker, object_store, tmp_path_factory, env_cache):
    """daphne + Celery worker + beat on the test database, for the tests of one module (a module
    may set CONSOLE_PROCESSES = 2 for two daphne processes sharing the port)."""
    env = console_env(object_store, database_url(), settings.REDIS_URL, settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"])
    running = Stack(env=env, log_dir=tmp_path_factory.mktemp("stack"), env_cache=env_cache,
                    console_processes=getattr(request.module, "CONSOLE_PROCESSES", 1))
    from console.celery import app
    from jobs.channel import notify

    app.control.purge()  # tasks queued by earlier unit tests name rows that no longer exist
    # a purged scheduler run leaves its request flag set: no tick would ask for a run until it expired
    notify.schedule_request_taken()
    running.start_console()
    running.start_workers()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def secured_services() -> SecuredServices:
    """A private PostgreSQL and Redis as `make run` starts them (passwords required, the database's
    socket in a directory only PostgreSQL's user enters), migrated; see secured.py."""
    # not under pytest's base temporary directory: PostgreSQL runs as `postgres` when we are root,
    # and every pytest session on the machine sets that base back to 0700
    run_dir = Path(tempfile.mkdtemp(prefix="simpleai-secured-"))
    services = start_secured_services(run_dir)
    yield services
    services.stop()
    shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def secured_stack(secured_services, object_store, tmp_path_factory, env_cache) -> Stack:
    """daphne + Celery worker + beat on `secured_services` (not the suite's database: the test
    reaches the console's data through `secured_services.sql` and `.manage`). Its agents, as
    every stack's, start without the console's credentials."""
    env = console_env(object_store, secured_services.database_url, secured_services.redis_url, "simpleai-secured")
    running = Stack(env=env, log_dir=tmp_path_factory.mktemp("secured-stack"), env_cache=env_cache)
    running.start_console()
    running.start_workers()
    yield running
    running.stop()


@pytest.fixture
def e2e_settings(object_storage_settings):
    """The test process reads and writes the same object storage as the stack."""
    return object_storage_settings


@pytest.fixture
def start_nodes(stack, transactional_db, runtime, object_store):
    """Start N agents with simulated GPUs (in the test's `runtime`) and wait until each one is connected."""
    from jobs.models import Node

    def start(*names: str, gpus: str = "simulated:8", server_type: str = "g2", extra: tuple[str, ...] = ()):
        agents = []
        for name in names:
            _, token = NodeToken.mint(name)
            agents.append(stack.agent(name, token, gpus=gpus, server_type=server_type, extra=(*runtime.agent_args, *extra),
                                      env=runtime.agent_env, file_storage=not runtime.without_file_storage))
        wait_until(
            lambda: Node.objects.filter(name__in=names, connected=True).count() == len(names),
            timeout=30, message=f"nodes {names} to connect",
        )
        return agents

    yield start
    for agent in stack.agents:
        agent.stop()
    stack.agents.clear()
    forget_identities(object_store)  # the stack's console made them for this test's users and attempts


@pytest.fixture
def upload_script(alice, e2e_settings, object_store):
    """Upload one of ./scripts into its owner's own storage space (Alice's unless told), with the
    owner's own keys, as a user would; returns its s3:// URL (uploads/<name>)."""

    def upload(name: str, owner=None) -> str:
        client, space = space_client(owner or alice, object_store.endpoint)
        client.upload_file(str(SCRIPTS / name), space.bucket, f"uploads/{name}")
        return f"s3://{space.bucket}/uploads/{name}"

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
        stack = item.funcargs.get("stack") or item.funcargs.get("secured_stack")
        if stack is not None:
            report.sections.append(("stack logs", stack.logs()))
        host = item.funcargs.get("container_host") or getattr(item.funcargs.get("runtime"), "host", None)
        if host is not None:
            report.sections.append(("podman and registry logs", host.logs()))
