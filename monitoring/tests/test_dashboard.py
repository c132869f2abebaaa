"""The service dashboard: every user has one; it shows their running jobs' key metrics and usage."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import actions, lifecycle
from jobs.models import Node, NodeGPU, Placement, ServerType
from jobs.scheduling.decision import Assignment
from jobs.tests.factories import logged_in
from monitoring.usage import gpu_hours

from .conftest import gpu_samples, store

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(db) -> Node:
    """node-a with 8 H100s."""
    node = Node.objects.create(name="node-a", server_type=ServerType.objects.get(name="g2"), address="10.0.0.5", connected=True)
    NodeGPU.objects.bulk_create([NodeGPU(node=node, index=i, uuid=f"GPU-{i}", model="NVIDIA H100 SXM", memory_gb=80) for i in range(8)])
    return node


def running_job(make_job, node, name: str, gpus: tuple[int, ...], owner=None, started_ago: timedelta = timedelta(minutes=30)):
    job = make_job(name=name, gpus_per_node=len(gpus), memory_gb=256 * len(gpus), owner=owner)
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, gpus)])
    actions.transition(job.pk, "Running", "The command runs on every node")
    now = timezone.now()
    started = max(now - started_ago, now.replace(day=1, hour=0, minute=0, second=0, microsecond=0))
    Placement.objects.filter(attempt__job=job).update(state="running", started_at=started)
    return job, (now - started).total_seconds() / 3600


def test_it_shows_running_jobs_with_key_metrics_and_totals(alice, bob, make_job, node):
    job, hours = running_job(make_job, node, "llama-ft", (0, 1))
    running_job(make_job, node, "bobs-job", (2,), owner=bob)
    make_job(name="waiting")  # Pending: holds no GPU, not on the dashboard
    now = time.time()
    store("node-a", gpu_samples("GPUUtilization", job.pk, "node-a", 0, [(now - 1800, 10.0), (now - 60, 90.0)])
          + gpu_samples("GPUUtilization", job.pk, "node-a", 1, [(now - 60, 70.0)])
          + gpu_samples("GPUTemperature", job.pk, "node-a", 0, [(now - 60, 60.0)])
          + gpu_samples("GPUTemperature", job.pk, "node-a", 1, [(now - 60, 65.0)])
          + [["TrainingLoss", now - 30, 0.5, {"job": job.pk, "stream": "master"}]])

    page = logged_in(alice).get("/dashboard/")

    html = page.content.decode()
    assert page.status_code == 200
    assert "llama-ft" in html and "bobs-job" not in html and "waiting" not in html
    row = html[html.index(f'data-job="{job.pk}"'):]
    row = row[:row.index("</tr>")]
    # primary statistic over the last 5 minutes across the job's GPUs
    assert '"GPUUtilization">80.0 %' in row and '"GPUTemperature">65.0 °C' in row and '"TrainingLoss">0.500' in row
    assert '"GPUPowerDraw">—' in row  # not reported
    assert '<p class="figure" id="total-gpus">2</p>' in html
    assert f'<p class="figure" id="total-gpu-hours">{2 * hours:.1f}</p>' in html
    sparks = page.context["sparks"][job.pk]
    assert [value for _, value in sparks] == [10.0, 80.0]  # one point per minute with samples


def test_it_makes_the_same_queries_for_one_and_three_running_jobs(alice, make_job, node, django_assert_num_queries):
    client = logged_in(alice)
    running_job(make_job, node, "one", (0,))
    client.get("/dashboard/")  # warm the session
    with CaptureQueriesContext(connection) as one:
        client.get("/dashboard/")
    running_job(make_job, node, "two", (1,))
    running_job(make_job, node, "three", (2,))
    with django_assert_num_queries(len(one.captured_queries)):
        client.get("/dashboard/")


def test_gpu_hours_count_only_this_month():
    month = datetime(2025, 3, 1, tzinfo=UTC)
    now = month + timedelta(days=2)
    assert gpu_hours([
        (month - timedelta(hours=5), month + timedelta(hours=1), 8),  # 1 h of it in March: 8
        (month + timedelta(days=1), None, 2),  # still running: 24 h × 2 = 48
        (month - timedelta(days=3), month - timedelta(days=2), 8),  # February: 0
        (None, None, 4),  # never started
    ], month, now) == pytest.approx(56.0)


def test_a_user_without_running_jobs_gets_an_empty_dashboard(alice):
    html = logged_in(alice).get("/dashboard/").content.decode()
    assert "No Training Job is running" in html and '<p class="figure" id="total-gpus">0</p>' in html
