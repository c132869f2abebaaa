"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

import psutil
import psycopg
from django.conf import settings

from jobs import actions
from jobs.models import TrainingJob
from monitoring.models import LogLine

from .stack import wait_until


def create_job(owner, name: str, command: str, node_count: int = 1, script_url: str = "", **extra) -> TrainingJob:
    registry_password = extra.pop("registry_password", "")  # stored encrypted, not a field
    fields = {
        "name": name, "learning_type": "on_demand", "framework": "pytorch", "framework_version": "2.13.0",
        "failover_enabled": False, "server_type": "g2", "gpus_per_node": 1, "memory_gb": 256,
        "node_count": node_count, "shm_size_gb": 8, "image_url": "127.0.0.1:5055/team/trainer:1",
        "registry_username": "", "volume_mount_path": "", "script_url": script_url, "command": command,
        **extra,
    }
    return actions.create_job(owner, fields, [], registry_password)


def wait_for_status(job_id: int, *statuses: str, timeout: float = 90) -> TrainingJob:
    def reached():
        job = TrainingJob.objects.filter(pk=job_id).first()
        return job if job and job.status in statuses else None

    try:
        return wait_until(reached, timeout=timeout, message=f"job {job_id} to reach {statuses}")
    except AssertionError:
        job = TrainingJob.objects.filter(pk=job_id).first()
        raise AssertionError(
            f"job {job_id} is {job.status if job else 'gone'} ({job.status_reason if job else ''}), not {statuses}; "
            f"its last lines:\n{last_lines(job_id)}"
        ) from None


def wait_for_checkpoint(job_id: int, step: int, timeout: float = 60) -> TrainingJob:
    """Until the job's checkpoint `step` is durable. A job that ends short of it, or is still short
    at the timeout, fails the test at once with each stream's last lines (where it stopped)."""
    def durable_or_ended():
        job = TrainingJob.objects.get(pk=job_id)
        return job if (job.checkpoint_step or 0) >= step or job.status != "Running" else None

    try:
        job = wait_until(durable_or_ended, timeout=timeout, message=f"checkpoint step {step} durable in object storage")
    except AssertionError as error:
        raise AssertionError(f"{error}\n{last_lines(job_id, 20)}") from None
    assert (job.checkpoint_step or 0) >= step, (
        f"job {job_id} is {job.status} ({job.status_reason}) at checkpoint step {job.checkpoint_step}, "
        f"short of {step}\n{last_lines(job_id, 30)}"
    )
    return job


def last_lines(job_id: int, count: int = 12) -> str:
    """Each stream's last lines with the time they were stored: where a job that did not end stopped."""
    lines = []
    for stream in LogLine.objects.filter(job_id=job_id).values_list("stream", flat=True).distinct().order_by("stream"):
        tail = LogLine.objects.filter(job_id=job_id, stream=stream).order_by("-attempt", "-seq")[:count]
        lines += [f"{line.ts:%H:%M:%S.%f}"[:-3] + f" {stream}: {line.text[:200]}" for line in reversed(tail)]
    return "\n".join(lines)


def stream_text(job_id: int, stream: str) -> list[str]:
    return list(LogLine.objects.filter(job_id=job_id, stream=stream).order_by("attempt", "seq").values_list("text", flat=True))


def _tcp_connections(pid: int) -> list:
    """The TCP connections of a process and its children; a child that exits meanwhile (a job's
    `sleep 1` under the agent) has none."""
    connections = []
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    for proc in procs:
        try:
            connections += proc.net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            continue
    return connections


class DatabaseGate:
    """Makes the test database refuse the console's connections (and drops the open ones), as a
    PostgreSQL outage looks to the console; the test's own connection stays."""

    def __init__(self) -> None:
        db = settings.DATABASES["default"]
        self.name = db["NAME"]
        self.admin = dict(host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"], dbname="postgres", autocommit=True)

    def _run(self, *statements: tuple[str, list]) -> None:
        with psycopg.connect(**self.admin) as conn:
            for sql, params in statements:
                conn.execute(sql, params)

    def close(self, pids: list[int]) -> None:
        """Refuse new connections, and drop the open ones of these processes (the console's) only:
        the test process's own connections, in any thread, stay usable."""
        ports = [c.laddr.port for pid in pids for c in _tcp_connections(pid) if c.raddr and c.raddr.port == int(self.admin["port"])]
        self._run(
            (f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS false', []),
            ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND client_port = ANY(%s)", [self.name, ports]),
        )

    def open(self) -> None:
        self._run((f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS true', []))
