"""Test doubles for the Django-level Slurm tests: a cluster row and a slurmrestd that answers from memory.

The end-to-end tests use a real Slurm; these cover the console's decisions quickly and for cases a
real cluster cannot be made to show on demand (a fourth node failure, an out-of-memory kill).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from jobs import actions
from jobs.models import ServerType, TrainingJob
from jobs.slurm.adapters import SlurmJobView
from jobs.slurm.client import SlurmError
from jobs.slurm.models import SlurmCluster
from jobs.tests.factories import job_fields

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class FakeSlurm:
    """Answers like SlurmClient; tests set `views`, read `submitted` and `cancelled`."""

    def __init__(self) -> None:
        self.views: dict[int, SlurmJobView] = {}
        self.submitted: list[tuple[str, dict]] = []
        self.cancelled: list[int] = []
        self.down: dict[str, str] = {}
        self.error: SlurmError | None = None  # raised by every call while set
        self.refuse: SlurmError | None = None  # raised by submit

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    def jobs(self) -> list[SlurmJobView]:
        self._check()
        return list(self.views.values())

    def job(self, job_id: int) -> SlurmJobView | None:
        self._check()
        return self.views.get(job_id)

    def submit(self, script: str, properties: dict) -> int:
        self._check()
        if self.refuse is not None:
            raise self.refuse
        self.submitted.append((script, properties))
        job_id = 100 + len(self.submitted)
        self.views[job_id] = SlurmJobView(job_id, properties["name"], "PENDING", "None", 0, (), properties["partition"])
        return job_id

    def cancel(self, job_id: int, signal: str | None = None) -> None:
        self._check()
        self.cancelled.append(job_id)

    def node_address(self, name: str) -> str:
        self._check()
        return f"10.0.0.{name[-1]}"

    def node_states(self) -> dict[str, str]:
        self._check()
        return self.down

    def set(self, job_id: int, state: str, reason: str = "None", restart: int = 0, nodes: tuple[str, ...] = ("n1", "n2"),
            start: datetime | None = NOW, end: datetime | None = None) -> None:
        self.views[job_id] = dataclasses.replace(self.views[job_id], state=state, reason=reason, restart_count=restart,
                                                 nodes=nodes, start_time=start, end_time=end)


def cluster(jobcomp_path: str = "/nonexistent/jobcomp.txt", **fields) -> SlurmCluster:
    row = SlurmCluster(
        name="local", server_type=ServerType.objects.get(name="g3"), rest_url="http://slurm.test:6820",
        user_name="svc", on_demand_partition="ondemand", spot_partition="spot", gpus_per_node=8,
        console_url="http://console.test:8000", work_dir="/var/tmp/simpleai", jobcomp_path=jobcomp_path,
        stop_grace_seconds=20, **fields,
    )
    row.set_jwt_key(b"k" * 32)
    row.full_clean()
    row.save()
    return row


def g3_job(owner, name: str = "on-slurm", **overrides) -> TrainingJob:
    fields = job_fields(**{"name": name, "server_type": "g3", "gpus_per_node": 4, "memory_gb": 2048, "node_count": 2, **overrides})
    return actions.create_job(owner, fields, [])
