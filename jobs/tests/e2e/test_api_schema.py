"""The OpenAPI schema tells the truth: schemathesis generates requests from `/api/schema/` (valid
and invalid ones) and sends them to real daphne on PostgreSQL, as a normal user, as staff and
without credentials.
Each answer must not be a 5xx, must use a status code the schema lists for that operation, and
must match the documented body. Bounded: a few examples per operation and user (< ~60 s).
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest
import schemathesis
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from jobs import actions
from jobs.choices import JobStatus
from jobs.models import Node, NodeGPU, ServerType, TrainingJob
from jobs.tests.factories import api_payload, job_fields

from .stack import Stack, database_url

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "10"))  # per operation and strategy
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def api_server(django_db_setup, tmp_path_factory):
    """daphne alone, on the test database (no worker: what a request enqueues waits in Redis)."""
    from django.conf import settings as django_settings

    env = {
        **os.environ, "DJANGO_SETTINGS_MODULE": "console.settings", "DATABASE_URL": database_url(),
        "REDIS_URL": django_settings.REDIS_URL, "CHANNELS_PREFIX": "api-schema", "PYTHONUNBUFFERED": "1",
    }
    server = Stack(env=env, log_dir=tmp_path_factory.mktemp("api-schema"))
    server.start_console()
    yield server
    server.stop()


@pytest.fixture
def objects(transactional_db) -> dict:
    """A normal user with a job of her own, a staff user, and a node for the staff endpoints."""
    users = get_user_model().objects
    alice = users.create_user("alice", password="alice-pass-123")
    staff = users.create_user("staff", password="staff-pass-123", is_staff=True, is_superuser=True)
    job = actions.create_job(alice, job_fields(name="schema-probe"), [])
    # running (on paper): deleting it answers 202 Terminating, not 204
    TrainingJob.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, current_attempt=1)
    node = Node.objects.create(name="node-s", server_type=ServerType.objects.get(name="g2"), address="127.0.0.1")
    NodeGPU.objects.create(node=node, index=0, uuid="GPU-s-0", model="NVIDIA H100 SXM", memory_gb=80)
    tokens = {name: Token.objects.create(user=user).key for name, user in [("alice", alice), ("staff", staff)]}
    pending = actions.create_job(alice, job_fields(name="schema-probe-waiting"), [])  # deleting it answers 204
    stoppable = actions.create_job(alice, job_fields(name="schema-probe-stoppable"), [])  # stop: 200, then 409
    return {"tokens": tokens, "jobs": [job.pk, pending.pk], "stoppable": stoppable.pk, "node": node.pk}


def real_ids(path: str, objects: dict) -> list[dict]:
    """Path parameters naming objects that exist, so examples reach past the 404."""
    if path == "/api/v1/training-jobs/{id}/stop/":
        return [{"id": objects["stoppable"]}]
    if path.startswith("/api/v1/training-jobs/{id}"):
        return [{"id": job_id} for job_id in objects["jobs"]]
    if path.startswith("/api/v1/nodes/{id}"):
        return [{"id": objects["node"]}]
    if path.startswith("/api/v1/server-types/{name}"):
        return [{"name": "g2"}]
    return []


@pytest.mark.duration(75)
def test_every_operation_answers_as_the_schema_says(api_server, objects):
    tokens = objects["tokens"]
    schema = schemathesis.openapi.from_url(
        f"{api_server.url}/api/schema/?format=json", headers={"Authorization": f"Token {tokens['staff']}"},
    )
    findings: list[str] = []
    seen: defaultdict[str, set[int]] = defaultdict(set)
    # deletions last: the other operations reach the job and the node first; and stop after them
    # all (it would end the running job that a deletion answers 202 for)
    operations = sorted((result.ok() for result in schema.get_all_operations()),
                        key=lambda op: (op.path.endswith("/stop/"), op.method.upper() == "DELETE"))
    assert len(operations) >= 20
    for operation in operations:
        codes = seen[f"{operation.method.upper()} {operation.path}"]
        strategies = [operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE)]
        strategies += [operation.as_strategy(GenerationMode.POSITIVE, path_parameters=ids)
                       for ids in real_ids(operation.path, objects)]
        if operation.method.upper() == "POST" and operation.path in {"/api/v1/training-jobs/", "/api/v1/training-jobs/validate/"}:
            # a valid job once (201; validate: 200), then the same again (created: a duplicate name, 400)
            name = "from-schema-checked" if operation.path.endswith("/validate/") else "from-schema"
            strategies.append(operation.as_strategy(GenerationMode.POSITIVE, body=api_payload(name=name),
                                                    media_type="application/json"))
        for strategy in strategies:

            @given(case=strategy)
            @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                      phases=[Phase.generate, Phase.shrink], derandomize=True, database=None)
            def exchange(case):
                for user in ("alice", "staff", None):
                    headers = {"Authorization": f"Token {tokens[user]}"} if user else {}
                    # a fresh session per call: no cookie carries one user's state to the next
                    response = case.call_and_validate(base_url=api_server.url, headers=headers, checks=CHECKS)
                    codes.add(response.status_code)  # noqa: B023 -- called within this iteration

            try:
                exchange()
            except Unsatisfiable:
                pass  # no invalid value exists (e.g. a free-text path segment): nothing to send
            except (Exception, BaseExceptionGroup) as failure:  # every operation's findings, then fail once
                findings.append(f"{operation.method.upper()} {operation.path}: {str(failure)[:1500]}")
    print("\n" + "\n".join(f"{name}: {sorted(codes)}" for name, codes in sorted(seen.items())))
    assert not findings, "\n\n".join(findings)
    # the run reached past the happy path: these answers were all met, and all were documented
    assert set().union(*seen.values()) >= {200, 201, 202, 204, 400, 401, 403, 404, 409}


# the operations whose rules the schema declares (jobs.api.schema, console.lib.api_strict): what it
# calls invalid, the API refuses
DECLARED = [
    ("GET", "/api/v1/training-jobs/"), ("POST", "/api/v1/training-jobs/"), ("POST", "/api/v1/training-jobs/validate/"),
    ("GET", "/api/v1/training-jobs/{id}/logs/"), ("GET", "/api/v1/training-jobs/{id}/metrics/"),
]


@pytest.mark.duration(30)
def test_what_the_schema_declares_invalid_the_api_refuses(api_server, objects):
    token = objects["tokens"]["alice"]
    schema = schemathesis.openapi.from_url(f"{api_server.url}/api/schema/?format=json", headers={"Authorization": f"Token {token}"})
    findings: list[str] = []
    for method, path in DECLARED:
        operation = schema[path][method].ok() if hasattr(schema[path][method], "ok") else schema[path][method]
        ids = {"id": objects["jobs"][0]} if "{id}" in path else None
        strategy = operation.as_strategy(GenerationMode.NEGATIVE, **({"path_parameters": ids} if ids else {}))

        @given(case=strategy)
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                  phases=[Phase.generate], derandomize=True, database=None)
        def exchange(case):
            case.call_and_validate(base_url=api_server.url, headers={"Authorization": f"Token {token}"},
                                   checks=[not_a_server_error, negative_data_rejection])

        try:
            exchange()
        except Unsatisfiable:
            pass
        except (Exception, BaseExceptionGroup) as failure:
            findings.append(f"{method} {path}: {str(failure)[:1500]}")
    assert not findings, "\n\n".join(findings)
