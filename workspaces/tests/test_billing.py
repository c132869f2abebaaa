"""Cost of jobs and workspaces from what really ran, on the job page and the usage page."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from jobs import actions as job_actions
from jobs.models import JobAttempt, Placement, ServerType
from workspaces.models import JobBilling, UsageArchive, WorkspaceNode
from workspaces.pricing import money
from workspaces.usage import bill_queryset, job_bill

from .factories import create_job, make_node, make_workspace

pytestmark = pytest.mark.django_db

# a fixed hour in the middle of this month, so the case never straddles a month boundary
BASE = timezone.now().replace(day=10, hour=10, minute=0, second=0, microsecond=0)


def at(minutes: float):
    return BASE + timedelta(minutes=minutes)


def attempt(job, number: int, nodes, start: float, end: float | None, kind: str = "initial", lost: float = 0) -> JobAttempt:
    """An attempt whose placements held their GPUs from `start` to `end` (minutes after BASE)."""
    row = JobAttempt.objects.create(
        job=job, number=number, kind=kind, master_addr="127.0.0.1", master_port=29500,
        running_at=at(start), ended_at=at(end) if end is not None else None, lost_seconds=lost,
    )
    Placement.objects.bulk_create([
        Placement(attempt=row, node=n, node_name=n.name, role="master" if r == 0 else f"worker-{r}", node_rank=r,
                  gpu_indices=list(range(job.gpus_per_node)), state="exited" if end is not None else "running",
                  started_at=at(start), ended_at=at(end) if end is not None else None)
        for r, n in enumerate(nodes)
    ])
    job.current_attempt = number
    job.save(update_fields=["current_attempt"])
    return row


def bill(job):
    return job_bill(bill_queryset().get(pk=job.pk), now=at(1000))


@pytest.fixture
def two_nodes(db):
    return [make_node("gpu-01"), make_node("gpu-02")]


def test_a_job_is_charged_for_the_time_its_nodes_ran(alice, alice_client, two_nodes):
    job = create_job(alice, gpus_per_node=8, memory_gb=2048, node_count=2)
    attempt(job, 1, two_nodes, 0, 90)
    result = bill(job)
    assert result.plan == "on_demand" and result.price_per_gpu_hour == Decimal("3.1000")
    assert result.total.charged_gpu_hours == 24
    assert money(result.total.amount) == Decimal("74.40")
    page = alice_client.get(f"/jobs/{job.pk}/").content.decode()
    assert re.search(r'id="job-cost">\$74\.40 \(24\.00 GPU-hours charged', page)


def test_a_running_job_costs_what_it_has_run_so_far(alice, two_nodes):
    job = create_job(alice, gpus_per_node=8, memory_gb=2048)
    attempt(job, 1, two_nodes[:1], 0, None)
    result = job_bill(bill_queryset().get(pk=job.pk), now=at(30))
    assert result.total.charged_gpu_hours == 4 and money(result.total.amount) == Decimal("12.40")


def test_a_failover_charges_neither_the_redone_work_nor_the_wait(alice, alice_client, db):
    """The hand-computed case of test_pricing, from database rows: $90.93, $8.27 not charged."""
    nodes = [make_node(f"gpu-0{i}") for i in range(1, 5)]
    job = create_job(alice, gpus_per_node=8, memory_gb=2048, node_count=2, failover_enabled=True)
    attempt(job, 1, nodes[:2], 0, 60)
    attempt(job, 2, nodes[2:], 65, 125, kind="failover", lost=900)
    result = bill(job)
    assert money(result.total.amount) == Decimal("90.93")
    assert money(result.total.credited) == Decimal("8.27")
    first, second = result.attempts
    assert first.lost_seconds == 600 and first.waited_seconds == 300
    assert second.lost_seconds == 0
    page = alice_client.get(f"/jobs/{job.pk}/").content.decode()
    assert "2.67 GPU-hours lost to interruptions not charged, $8.27" in page
    assert "600 s (2.67 GPU-h)" in page and "300 s (no node held)" in page


def test_the_api_gives_a_jobs_cost_and_its_breakdown_as_the_page_does(alice, alice_api, alice_client, db):
    nodes = [make_node(f"gpu-0{i}") for i in range(1, 5)]
    job = create_job(alice, gpus_per_node=8, memory_gb=2048, node_count=2, failover_enabled=True)
    attempt(job, 1, nodes[:2], 0, 60)
    attempt(job, 2, nodes[2:], 65, 125, kind="failover", lost=900)

    cost = alice_api.get(f"/api/v1/training-jobs/{job.pk}/").json()["cost"]

    assert cost == {
        "currency": "USD", "plan": "on_demand", "price_per_gpu_hour": "3.1000",
        "amount": "90.93", "credited": "8.27",
        "run_gpu_hours": "32.0000", "charged_gpu_hours": "29.3333", "lost_gpu_hours": "2.6667",
        "attempts": [
            {"number": 1, "kind": "initial", "run_gpu_hours": "16.0000", "lost_gpu_hours": "2.6667",
             "charged_gpu_hours": "13.3333", "lost_seconds": 600.0, "waited_seconds": 300.0, "amount": "41.33",
             "price_per_gpu_hour": "3.1000", "on_demand": False},
            {"number": 2, "kind": "failover", "run_gpu_hours": "16.0000", "lost_gpu_hours": "0.0000",
             "charged_gpu_hours": "16.0000", "lost_seconds": 0.0, "waited_seconds": 0.0, "amount": "49.60",
             "price_per_gpu_hour": "3.1000", "on_demand": False},
        ],
    }
    page = alice_client.get(f"/jobs/{job.pk}/").content.decode()
    assert re.search(r'id="job-cost">\$90\.93 ', page)  # the page and the API agree
    assert alice_api.get("/api/v1/training-jobs/").json()["results"][0]["cost"]["amount"] == "90.93"


@pytest.mark.parametrize("count", [2, 12])
def test_the_api_list_with_costs_makes_the_same_queries_for_2_and_12_jobs(alice, alice_api, two_nodes, django_assert_num_queries, count):
    for i in range(count):
        attempt(create_job(alice, name=f"run-{i}"), 1, two_nodes[:1], 0, 30)
    alice_api.get("/api/v1/training-jobs/")
    # token, count, jobs (with server type, workspace, billing), tags, history, attempts, their placements
    with django_assert_num_queries(7):
        assert alice_api.get("/api/v1/training-jobs/").json()["count"] == count


def test_a_spot_interruption_is_charged_at_the_spot_price_without_the_lost_work(alice, two_nodes):
    job = create_job(alice, learning_type="spot", gpus_per_node=8, memory_gb=2048)
    attempt(job, 1, two_nodes[:1], 0, 40)
    attempt(job, 2, two_nodes[1:], 60, 80, kind="spot_resume", lost=1800)
    result = bill(job)
    assert result.plan == "spot"
    assert money(result.total.amount) == Decimal("8.27")  # 6.6667 GPU-h × $1.24
    assert result.total.lost_gpu_hours.quantize(Decimal("0.0001")) == Decimal("1.3333")


def test_a_price_change_does_not_alter_what_a_job_already_costs(alice, two_nodes):
    job = create_job(alice, gpus_per_node=8, memory_gb=2048)
    attempt(job, 1, two_nodes[:1], 0, 60)
    ServerType.objects.filter(name="g2").update(on_demand_price_per_gpu_hour=Decimal("9.9900"))
    assert money(bill(job).total.amount) == Decimal("24.80")
    assert create_job(alice, name="later").billing.price_per_gpu_hour == Decimal("9.9900")


def test_a_job_in_a_workspace_costs_nothing_more(alice, two_nodes):
    ws = make_workspace(alice, node_count=1)
    job = create_job(alice, workspace=ws, gpus_per_node=8, memory_gb=2048)
    attempt(job, 1, two_nodes[:1], 0, 60)
    assert JobBilling.objects.get(job=job).plan == "workspace"
    assert bill(job).total.amount == 0


def test_a_workspace_bills_its_reserved_node_hours_at_the_contract_rate(alice, alice_client, two_nodes):
    ws = make_workspace(alice, node_count=2, contract_months=3)
    assert ws.price_per_gpu_hour == Decimal("2.4800")  # $3.10 less 20 %
    WorkspaceNode.objects.filter(workspace=ws).update(reserved_at=timezone.now() - timedelta(hours=10))
    page = alice_client.get(f"/workspaces/{ws.pk}/").content.decode()
    # 2 nodes × 8 GPUs × 10 h × $2.48 = $396.80 (give or take the seconds the request took)
    assert re.search(r'id="billed">\$396\.8\d', page)
    assert "$28,966.40 per month" in page


def test_deleting_a_finished_job_keeps_its_cost_in_the_month(alice, alice_client, two_nodes):
    job = create_job(alice, gpus_per_node=8, memory_gb=2048, node_count=2)
    attempt(job, 1, two_nodes, 0, 90)
    for status in ("Creating", "Running", "Completed"):
        job_actions.transition(job.pk, status)
    before = alice_client.get("/usage/").context["selected"].total.amount
    assert job_actions.delete_job(job.pk) == "deleted"
    archived = UsageArchive.objects.filter(owner=alice, kind="job", source_id=job.pk)
    assert archived.count() == 2
    after = alice_client.get("/usage/")
    assert after.context["selected"].total.amount == before
    assert "llama-finetune <span class=\"muted\">(deleted)</span>" in after.content.decode()


def test_the_usage_page_shows_cost_by_month_job_and_plan_with_a_local_chart(alice, alice_client, two_nodes):
    on_demand = create_job(alice, name="od", gpus_per_node=8, memory_gb=2048)
    attempt(on_demand, 1, two_nodes[:1], 0, 60)
    spot = create_job(alice, name="sp", learning_type="spot", gpus_per_node=8, memory_gb=2048)
    attempt(spot, 1, two_nodes[1:], 0, 60)
    response = alice_client.get("/usage/")
    page = response.content.decode()
    month = response.context["selected"]
    assert money(month.by_plan["on_demand"].amount) == Decimal("24.80")
    assert money(month.by_plan["spot"].amount) == Decimal("9.92")
    assert [item.name for item, _ in month.by_item] == ["od", "sp"]
    assert '/static/vendor/plotly/plotly.min.js' in page and "cdn" not in page.lower()
    chart = json.loads(re.search(r'<script id="usage-data" type="application/json">(.*?)</script>', page).group(1))
    assert {trace["name"] for trace in chart["traces"]} == {"On-Demand", "Spot"}


def test_plotly_is_served_by_the_console(client, settings):
    from django.contrib.staticfiles import finders

    assert finders.find("vendor/plotly/plotly.min.js")


def test_the_quota_page_shows_limits_and_current_usage(alice, alice_client, two_nodes):
    from workspaces.models import Quota

    Quota.objects.create(user=alice, max_gpus_in_use=16, monthly_gpu_hour_budget=100)
    job = create_job(alice, gpus_per_node=8, memory_gb=2048)
    Placement.objects.create(
        attempt=JobAttempt.objects.create(job=job, number=1, master_addr="x", master_port=1), node=two_nodes[0],
        node_name="gpu-01", role="master", node_rank=0, gpu_indices=list(range(8)), state="running", started_at=timezone.now(),
    )
    page = alice_client.get("/quotas/").content.decode()
    assert "Your own quota" in page
    assert "<td>Maximum GPUs in use at once</td><td>16</td><td>8 GPUs in use</td>" in page
    assert "<td>Monthly GPU-hour budget</td><td>100.00 GPU-hours</td>" in page
