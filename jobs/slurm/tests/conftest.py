"""Fixtures of the Slurm tests: a real Slurm cluster, and the console's registration of it.

The end-to-end tests run the real console stack (daphne, Celery worker and beat, SeaweedFS) of
jobs/tests/e2e against a real Slurm 22.05 started here. Outside CI a machine without Slurm skips
them; in CI (CI=true) a missing Slurm is a failure.
"""

from __future__ import annotations

import pytest

from jobs.tests.e2e import conftest as e2e
from jobs.tests.machine import unavailable

from .cluster import LocalSlurm, SlurmUnavailable, register

# the real console stack of the end-to-end tests (the personas are the root conftest's)
stack, e2e_settings, upload_script = e2e.stack, e2e.e2e_settings, e2e.upload_script
env_cache = e2e.env_cache


@pytest.fixture(scope="session")
def slurm():
    """A real Slurm cluster (munged, slurmctld, two slurmd, slurmrestd with JWT) for the session."""
    cluster = LocalSlurm()
    try:
        cluster.start()
    except SlurmUnavailable as exc:
        unavailable(f"Slurm does not start here: {exc}")
    yield cluster
    cluster.stop()


@pytest.fixture
def fake_slurm(monkeypatch):
    """Registered clusters' slurmrestd answers from memory (fakes.FakeSlurm), for the Django-level tests."""
    from jobs.slurm.models import SlurmCluster

    from .fakes import FakeSlurm

    fake = FakeSlurm()
    def client(self, timeout: float = 10.0, user: str = "") -> FakeSlurm:
        fake.users.append(user or self.user_name)
        return fake

    monkeypatch.setattr(SlurmCluster, "client", client)
    return fake


@pytest.fixture
def local(fake_slurm, tmp_path):
    """A cluster row whose slurmrestd is `fake_slurm`, and its job completion file (fakes.jobcomp)."""
    from .fakes import cluster

    return cluster(jobcomp_path=str(tmp_path / "jobcomp.txt"))


@pytest.fixture
def idle_slurm(slurm):
    """The cluster with no job of an earlier test left in it, before and after the test."""
    slurm.clear()
    yield slurm
    slurm.clear()


@pytest.fixture
def slurm_cluster(idle_slurm, stack, transactional_db):
    """The console knows the local cluster: jobs of server type g3 run there."""
    return register(idle_slurm, stack.url)


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for name, title in (("stack", "stack logs"), ("slurm", "slurm logs"), ("idle_slurm", "slurm logs")):
            running = item.funcargs.get(name)
            if isinstance(running, LocalSlurm) or (name == "stack" and running is not None):
                report.sections.append((title, running.logs()))
        stack = item.funcargs.get("stack")
        if stack is not None and (stack.log_dir / "worker.log").exists():  # the whole of the worker's tracebacks, which the tail may have cut
            text = (stack.log_dir / "worker.log").read_text(errors="replace")
            report.sections.append(("worker errors", "\n".join(line for line in text.splitlines() if "Task " not in line)[-20000:]))


__all__ = ["SlurmUnavailable"]
