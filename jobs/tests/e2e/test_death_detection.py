"""A node whose agent goes away is acted on from the evidence, not after the heartbeat grace:
a SIGKILLed agent's connection closes (the console sees it close and the node not come back),
a stopped agent says goodbye. The stack's grace is 20 s; both causes name the evidence that
only these paths give."""

from __future__ import annotations

import pytest

from jobs.models import JobAttempt, Node, TrainingJob

from .helpers import create_job, wait_for_status
from .stack import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def _running_on(alice, start_nodes, name: str):
    agents = {a.name: a for a in start_nodes("node-a", "node-b")}
    job = create_job(alice, name, "sleep 120", failover_enabled=True)
    job = wait_for_status(job.pk, "Running", timeout=60)
    node = JobAttempt.objects.get(job=job, number=1).placements.get().node_name
    return job, agents[node], node


@pytest.mark.duration(25)
def test_a_killed_agent_is_acted_on_from_its_closed_connection(alice, start_nodes, e2e_settings):
    job, agent, node = _running_on(alice, start_nodes, "agent-killed")

    agent.kill()

    wait_until(lambda: JobAttempt.objects.get(job=job, number=1).cause, timeout=60, message="attempt 1 to end")  # how fast: benchmarks, not here
    assert f"node {node} lost its agent's connection, which did not come back" in JobAttempt.objects.get(job=job, number=1).cause
    assert Node.objects.get(name=node).lost
    assert TrainingJob.objects.get(pk=job.pk).status in ("Pending - failoverinprogress", "Creating", "Running")


@pytest.mark.duration(25)
def test_a_stopped_agent_says_goodbye_and_its_job_moves_on(alice, start_nodes, e2e_settings):
    job, agent, node = _running_on(alice, start_nodes, "agent-stopped")

    agent.stop()  # SIGTERM: the agent stops its placements and exits cleanly

    wait_until(lambda: JobAttempt.objects.get(job=job, number=1).cause, timeout=60, message="attempt 1 to end")
    cause = JobAttempt.objects.get(job=job, number=1).cause
    assert f"node {node} went away: its agent shut down" in cause, cause
    assert Node.objects.get(name=node).lost
