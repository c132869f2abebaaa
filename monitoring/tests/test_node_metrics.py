"""Staff node pages: every GPU's health with its current utilisation; the fleet's utilisation."""

from __future__ import annotations

import time

import pytest

from jobs.models import Node, NodeGPU, ServerType
from jobs.tests.factories import logged_in

from .conftest import gpu_samples, store

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(db) -> Node:
    node = Node.objects.create(name="node-a", server_type=ServerType.objects.get(name="g2"), address="10.0.0.5", connected=True)
    NodeGPU.objects.bulk_create([
        NodeGPU(node=node, index=i, uuid=f"GPU-{i}", model="NVIDIA H100 SXM", memory_gb=80, healthy=i != 1) for i in range(2)])
    return node


def test_the_node_page_shows_each_gpus_health_and_current_readings(staff, node):
    now = time.time()
    store("node-a", gpu_samples("GPUUtilization", None, "node-a", 0, [(now - 600, 5.0), (now - 20, 93.0)])
          + gpu_samples("GPUTemperature", None, "node-a", 0, [(now - 20, 68.0)])
          + gpu_samples("GPUUtilization", None, "node-a", 1, [(now - 900, 40.0)])  # too old to be "now"
          + [["NodeCPUUtilization", now - 20, 37.5, {}]])

    html = logged_in(staff).get(f"/nodes/{node.pk}/").content.decode()

    table = html[html.index('id="gpu-metrics"'):html.index('id="node-metrics"')]
    gpu0 = table[table.index('data-gpu="0"'):table.index('data-gpu="1"')]
    gpu1 = table[table.index('data-gpu="1"'):]
    assert "healthy" in gpu0 and "93.0 %" in gpu0 and "68.0 °C" in gpu0
    assert "faulty" in gpu1 and "40.0 %" not in gpu1
    assert "CPU utilisation 37.5 %" in html


def test_the_node_list_shows_each_nodes_utilisation(staff, node):
    now = time.time()
    store("node-a", gpu_samples("GPUUtilization", None, "node-a", 0, [(now - 20, 90.0)])
          + gpu_samples("GPUUtilization", None, "node-a", 1, [(now - 20, 50.0)]))
    html = logged_in(staff).get("/nodes/").content.decode()
    fleet = html[html.index('id="fleet-utilisation"'):]
    assert "<td>node-a</td>" in fleet and "70.0 %" in fleet


def test_node_pages_are_for_staff_only(alice, node):
    response = logged_in(alice).get(f"/nodes/{node.pk}/")
    assert response.status_code == 403 and "Staff only" in response.content.decode()
