"""A console on password-protected PostgreSQL and Redis (as `make run` starts them) runs jobs,
and neither its agents nor their jobs hold the credentials (the hostile-tenant tests build on
`secured_stack`)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import redis

from .stack import wait_until

pytestmark = [pytest.mark.slow]

CREATE_JOB = """
from django.contrib.auth import get_user_model
from jobs import actions
from jobs.tests.factories import job_fields
owner = get_user_model().objects.create_user("sealed-owner")
actions.create_job(owner, job_fields(name="sealed", command="env; echo done", shm_size_gb=8), [])
"""


def test_a_job_runs_on_a_console_whose_database_and_redis_require_passwords_it_never_sees(secured_services, secured_stack):
    db_password = urlsplit(secured_services.database_url).password
    redis_password = urlsplit(secured_services.redis_url).password
    assert db_password and redis_password

    token = secured_services.manage("nodetoken", "sealed-1", "--quiet").strip()
    agent = secured_stack.agent("sealed-1", token)
    wait_until(lambda: secured_services.sql("SELECT connected FROM jobs_node WHERE name = %s", ("sealed-1",)) == [(True,)],
               timeout=30, message="the agent to register")
    secured_services.manage("shell", "-c", CREATE_JOB)  # placed by Celery, pushed over the Channels layer
    status = wait_until(
        lambda: [s for (s,) in secured_services.sql("SELECT status FROM jobs_trainingjob WHERE name = 'sealed'")
                 if s in ("Completed", "Failed")],
        timeout=120, message="the job to end",
    )
    lines = [t for (t,) in secured_services.sql(
        "SELECT text FROM monitoring_logline l JOIN jobs_trainingjob j ON j.id = l.job_id WHERE j.name = 'sealed'")]
    assert status == ["Completed"], lines[-20:]
    assert "done" in lines and any(line.startswith("PATH=") for line in lines)  # the job printed its environment
    agent_environ = Path(f"/proc/{agent.process.pid}/environ").read_bytes()
    for secret in (db_password, redis_password):
        assert not any(secret in line for line in lines), secret
        assert secret.encode() not in agent_environ
    names = {entry.split(b"=", 1)[0].decode() for entry in agent_environ.split(b"\0") if entry}
    assert not {"DATABASE_URL", "REDIS_URL"} & names
    assert not any(line.startswith(("DATABASE_URL=", "REDIS_URL=")) for line in lines)

    # what a job would try with the addresses alone: refused
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(secured_services.database_url.replace(f":{db_password}@", "@"), connect_timeout=5).close()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(secured_services.redis_url.replace(f":{redis_password}@", "@")).ping()
