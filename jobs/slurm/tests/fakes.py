"""Test doubles for the Django-level Slurm tests: a cluster row and a slurmrestd that answers from memory.

The end-to-end tests use a real Slurm; these cover the console's decisions quickly and for cases a
real cluster cannot be made to show on demand (a fourth node failure, an out-of-memory kill).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from jobs import actions
from jobs.models import ServerType, TrainingJob
from jobs.slurm.adapters import AccountingView, SlurmJobView
from jobs.slurm.client import SlurmError, Submission
from jobs.slurm.models import SlurmCluster, SlurmJob
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
        self.warnings: tuple[str, ...] = ()  # what slurmctld says beside a job id it gives
        self.released: list[int] = []
        self.users: list[str] = []  # whom each client was made for
        self.accounted: dict[int, AccountingView] = {}  # what slurmdbd says of ended jobs

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    def jobs(self) -> list[SlurmJobView]:
        self._check()
        return list(self.views.values())

    def job(self, job_id: int) -> SlurmJobView | None:
        self._check()
        return self.views.get(job_id)

    def submit(self, script: str, properties: dict) -> Submission:
        self._check()
        if self.refuse is not None:
            raise self.refuse
        self.submitted.append((script, properties))
        job_id = 100 + len(self.submitted)
        self.views[job_id] = SlurmJobView(job_id, properties["name"], "PENDING", "None", 0, (), properties["partition"],
                                          comment=properties.get("comment", ""))
        return Submission(job_id, self.warnings)

    def accounting(self, job_id: int) -> AccountingView | None:
        self._check()
        return self.accounted.get(job_id)

    def release(self, job_id: int) -> None:
        self._check()
        self.released.append(job_id)

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
            start: datetime | None = NOW, end: datetime | None = None, description: str = "") -> None:
        self.views[job_id] = dataclasses.replace(self.views[job_id], state=state, reason=reason, restart_count=restart,
                                                 nodes=nodes, start_time=start, end_time=end, description=description)


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


def jobcomp(local: SlurmCluster, *lines: str) -> None:
    with open(local.jobcomp_path, "a") as file:
        for line in lines:
            file.write(line + "\n")


def record(job_id: int, state: str, exit_code: str = "0:0", nodes: str = "n[1-2]") -> str:
    return (f"JobId={job_id} UserId=svc(1000) GroupId=svc(1000) Name=simpleai-x JobState={state} Partition=ondemand "
            f"TimeLimit=UNLIMITED StartTime=2026-11-30T12:00:00 EndTime=2026-11-30T13:00:00 NodeList={nodes} NodeCnt=2 "
            f"ProcCnt=2 WorkDir=/var/tmp/simpleai DerivedExitCode=0:0 ExitCode={exit_code} ")


def reload(job: TrainingJob) -> TrainingJob:
    return TrainingJob.objects.get(pk=job.pk)


def slurm_id(job: TrainingJob) -> int:
    return SlurmJob.objects.get(training_job_id=job.pk).slurm_job_id
