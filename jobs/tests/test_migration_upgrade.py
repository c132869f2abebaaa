"""An upgrade from the previous schema: a database migrated to each app's migration before its
newest, holding a user, a node and a running job (attempt, placement) as that schema stored them,
migrates to the newest schema and the rows read back intact through today's models.

It runs on a scratch database of its own, never the shared test database (rewinding that one's
schema broke the tests after it), with `manage.py` in subprocesses pointed at it; no django_db
marker, so it mixes with no other kind of test.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]

# the schema before the newest migration of each app that has more than one (the others stay at
# their newest): what a console of the previous release left in its database
PREVIOUS = {
    "jobs": "0019_merge_projects_and_goodput",
    "slurm": "0001_slurm_clusters_jobs_runs",
    "workspaces": "0002_seed_contract_terms",
    "monitoring": "0006_logline_lock_order",
}

# Run in `manage.py shell` on the scratch database: migrate to PREVIOUS, then write the rows with
# the models of that schema (the migration state's, as a data migration would).
BEFORE = """
import json, os
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

previous = {app: (app, name) for app, name in json.loads(os.environ["PREVIOUS"]).items()}
executor = MigrationExecutor(connection)
targets = [previous.get(app, (app, name)) for app, name in executor.loader.graph.leaf_nodes()]
executor.migrate(targets)
executor.loader.build_graph()
applied = sorted(f"{app}.{name}" for app, name in executor.loader.applied_migrations)
models = executor.loader.project_state(targets).apps
User = models.get_model("auth", "User")
ServerType, Node, NodeGPU = (models.get_model("jobs", name) for name in ("ServerType", "Node", "NodeGPU"))
TrainingJob, JobAttempt, Placement = (models.get_model("jobs", name) for name in ("TrainingJob", "JobAttempt", "Placement"))

server_type = ServerType.objects.get(name="g2")
user = User.objects.create(username="old-alice", email="alice@example.com")
node = Node.objects.create(name="old-gpu-01", server_type=server_type, address="10.0.0.7", cpus=96, memory_gb=1024,
                           connected=True)
NodeGPU.objects.create(node=node, index=0, uuid="GPU-old-0", model="NVIDIA H100 SXM", memory_gb=80)
job = TrainingJob.objects.create(owner=user, name="before-the-upgrade", server_type=server_type, gpus_per_node=1,
                                 memory_gb=128, image_url="registry.example.com/team/trainer:1", command="python train.py",
                                 status="Running", current_attempt=1, checkpoint_step=40,
                                 checkpoint_url="s3://bucket/jobs/1/checkpoints/step-40")
attempt = JobAttempt.objects.create(job=job, number=1, master_addr="10.0.0.7", master_port=20007)
placement = Placement.objects.create(attempt=attempt, node=node, node_name=node.name, role="master", node_rank=0,
                                     gpu_indices=[0], state="running")
print("BEFORE " + json.dumps({"applied": applied, "user": user.pk, "node": node.pk, "job": job.pk,
                              "attempt": attempt.pk, "placement": placement.pk}))
"""

# Run in a new `manage.py shell`: migrate to the newest schema, then read the rows with today's models.
AFTER = """
import json, os
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from jobs.models import JobAttempt, Node, Placement, TrainingJob

call_command("migrate", verbosity=0)
executor = MigrationExecutor(connection)
ids = json.loads(os.environ["ROWS"])
job = TrainingJob.objects.select_related("owner", "server_type").get(pk=ids["job"])
attempt = JobAttempt.objects.get(pk=ids["attempt"])
placement = Placement.objects.select_related("node").get(pk=ids["placement"])
node = Node.objects.select_related("server_type").get(pk=ids["node"])
print("AFTER " + json.dumps({
    "unapplied": len(executor.migration_plan(executor.loader.graph.leaf_nodes())),
    "user": get_user_model().objects.get(pk=ids["user"]).username,
    "job": [job.name, job.owner.username, job.status, job.current_attempt, job.checkpoint_step, job.server_type.name,
            job.time_limit_minutes, job.spot_fallback_after_minutes],
    "attempt": [attempt.job_id, attempt.number, attempt.master_port],
    "placement": [placement.attempt_id, placement.node.name, placement.role, placement.gpu_indices, placement.state],
    "node": [node.name, node.server_type.name, list(node.gpus.values_list("uuid", flat=True))],
    "jobs_of_node": list(TrainingJob.objects.filter(attempts__placements__node=node).values_list("name", flat=True)),
}))
"""


@pytest.fixture
def scratch_database() -> Iterator[str]:
    """A new, empty database on the test server (dropped afterwards); its DATABASE_URL."""
    db = settings.DATABASES["default"]
    server = {"host": db["HOST"], "port": db["PORT"] or None, "user": db["USER"], "password": db["PASSWORD"] or None}
    name = f"simpleai_upgrade_{secrets.token_hex(6)}"
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield (f"postgres://{quote(db['USER'], safe='')}:{quote(db['PASSWORD'] or '', safe='')}@/{name}"
               f"?host={quote(db['HOST'], safe='')}&port={db['PORT']}")
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _shell(database_url: str, code: str, marker: str, **env: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "shell", "-c", code], cwd=ROOT,
                          env={**os.environ, "DATABASE_URL": database_url, **env},
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith(marker))[len(marker):])


def test_a_database_of_the_previous_schema_upgrades_with_its_rows_intact(scratch_database):
    before = _shell(scratch_database, BEFORE, "BEFORE ", PREVIOUS=json.dumps(PREVIOUS))
    for app, name in PREVIOUS.items():
        assert f"{app}.{name}" in before["applied"]
    assert "jobs.0020_trainingjob_time_limit_minutes" not in before["applied"]  # really the schema before

    after = _shell(scratch_database, AFTER, "AFTER ", ROWS=json.dumps(before))
    assert after["unapplied"] == 0
    assert after["user"] == "old-alice"
    assert after["job"] == ["before-the-upgrade", "old-alice", "Running", 1, 40, "g2", None, None]
    assert after["attempt"] == [before["job"], 1, 20007]
    assert after["placement"] == [before["attempt"], "old-gpu-01", "master", [0], "running"]
    assert after["node"] == ["old-gpu-01", "g2", ["GPU-old-0"]]
    assert after["jobs_of_node"] == ["before-the-upgrade"]
