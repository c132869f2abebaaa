"""Workspace lifecycle and node reservation: real scheduler passes over registry rows."""

from __future__ import annotations

import pytest

from jobs.models import Node, TrainingJob
from workspaces import actions
from workspaces.models import UsageArchive, Workspace, WorkspaceNode
from workspaces.reservations import reconcile_now

from .factories import create_job, finish, make_node, make_workspace, place

pytestmark = pytest.mark.django_db

WHOLE_NODE = {"gpus_per_node": 8, "memory_gb": 2048}


def reserved(workspace: Workspace) -> list[str]:
    return sorted(WorkspaceNode.objects.filter(workspace=workspace, released_at__isnull=True).values_list("node_name", flat=True))


def node_of(job: TrainingJob) -> list[str]:
    job.refresh_from_db()
    return sorted(p.node_name for a in job.attempts.all() for p in a.placements.all())


def test_a_new_workspace_reserves_free_nodes_and_is_deployed(alice, nodes):
    ws = make_workspace(alice, node_count=2)
    assert ws.status == "Deployed"
    assert ws.status_reason == "2 node(s) reserved: gpu-01, gpu-02"
    assert reserved(ws) == ["gpu-01", "gpu-02"]
    assert [(c.old_status, c.new_status) for c in ws.status_changes.all()] == [("", "Creating"), ("Creating", "Deployed")]


def test_a_workspace_waits_in_creating_until_enough_nodes_are_free(alice, db):
    make_node("gpu-01")
    ws = make_workspace(alice, node_count=2)
    assert ws.status == "Creating"
    assert ws.status_reason == "Waiting for 1 more free g2 node(s): 1 of 2 reserved"
    make_node("gpu-02")
    reconcile_now()
    ws.refresh_from_db()
    assert ws.status == "Deployed" and reserved(ws) == ["gpu-01", "gpu-02"]


def test_a_node_that_runs_a_job_is_not_reserved(alice, bob, nodes, run_scheduler):
    job = create_job(bob, name="bobs", **WHOLE_NODE)
    run_scheduler()
    busy = node_of(job)
    ws = make_workspace(alice, node_count=3)
    assert ws.status == "Deployed"
    assert not set(busy) & set(reserved(ws))


def test_another_users_job_never_lands_on_a_reserved_node(alice, bob, run_scheduler, db):
    make_node("gpu-01"), make_node("gpu-02")
    ws = make_workspace(alice, node_count=1)
    assert reserved(ws) == ["gpu-01"]
    first = create_job(bob, name="first", **WHOLE_NODE)
    second = create_job(bob, name="second", **WHOLE_NODE)
    run_scheduler()
    first.refresh_from_db(), second.refresh_from_db()
    assert node_of(first) == ["gpu-02"]
    # gpu-01 is idle, but reserved: the second job waits
    assert second.status == "Pending"
    assert second.status_reason == (
        "Waiting for 1 × g2 node with 8 free GPUs: 0 fit now; 8 GPUs in use by your jobs; "
        "1 node reserved by Training Workspaces"
    )


def test_a_spot_job_never_lands_on_a_reserved_node(alice, bob, run_scheduler, db):
    make_node("gpu-01")
    make_workspace(alice, node_count=1)
    spot = create_job(bob, name="spot", learning_type="spot", gpus_per_node=1, memory_gb=256)
    run_scheduler()
    spot.refresh_from_db()
    assert spot.status == "Pending"
    assert spot.status_reason == "Waiting for 1 × g2 node with 1 free GPU: 0 fit now; 1 node reserved by Training Workspaces"


def test_the_owners_jobs_run_in_the_workspace_only_when_created_in_it(alice, run_scheduler, db):
    make_node("gpu-01"), make_node("gpu-02")
    ws = make_workspace(alice, node_count=1)
    inside = create_job(alice, name="inside", workspace=ws, gpus_per_node=4, memory_gb=1024)
    outside = create_job(alice, name="outside", gpus_per_node=4, memory_gb=1024)
    run_scheduler()
    assert node_of(inside) == ["gpu-01"]
    assert node_of(outside) == ["gpu-02"]  # the shared pool: never a reserved node, not even its owner's


def test_a_job_in_a_workspace_still_creating_waits_for_its_nodes(alice, run_scheduler, db):
    ws = make_workspace(alice, node_count=1)
    job = create_job(alice, name="early", workspace=ws, **WHOLE_NODE)
    run_scheduler()
    job.refresh_from_db()
    assert job.status == "Pending"
    assert job.status_reason == "Waiting for Training Workspace team-ws to reserve its nodes (Creating)"
    make_node("gpu-01")
    run_scheduler()  # the pass reserves the node first, then places the job on it
    assert node_of(job) == ["gpu-01"]


def test_growing_waits_for_free_nodes(alice, bob, run_scheduler, db):
    make_node("gpu-01"), make_node("gpu-02")
    ws = make_workspace(alice, node_count=1)
    bobs = create_job(bob, name="bobs", keep_alive_minutes=0, **WHOLE_NODE)
    run_scheduler()
    ws = actions.resize_workspace(ws.pk, 2)
    assert ws.status == "Updating"
    assert ws.status_reason == "Waiting for 1 more free g2 node(s): 1 of 2 reserved"
    finish(bobs)
    reconcile_now()
    ws.refresh_from_db()
    assert ws.status == "Deployed" and reserved(ws) == ["gpu-01", "gpu-02"]


def _workspace_with_two_busy_nodes(alice, run_scheduler):
    """Two reserved nodes, each running one half-node job of the workspace (job-1 on gpu-01)."""
    nodes = [make_node("gpu-01"), make_node("gpu-02")]
    ws = make_workspace(alice, node_count=2)
    jobs = [create_job(alice, name=f"job-{i}", workspace=ws, keep_alive_minutes=0, gpus_per_node=4, memory_gb=1024) for i in (1, 2)]
    for job, node in zip(jobs, nodes, strict=True):
        place(job, node)
    return ws, jobs


def test_shrinking_refuses_to_take_a_node_that_runs_a_job(alice, run_scheduler, db):
    ws, _ = _workspace_with_two_busy_nodes(alice, run_scheduler)
    with pytest.raises(actions.ResizeRefused) as refused:
        actions.resize_workspace(ws.pk, 1)
    assert str(refused.value) == (
        "Cannot shrink to 1 node(s) now: only 0 of the 2 nodes are idle (gpu-01 runs job-1; gpu-02 runs job-2). "
        "Stop those jobs first, or choose to drain: busy nodes are released when their jobs end."
    )
    ws.refresh_from_db()
    assert ws.node_count == 2 and ws.status == "Deployed" and reserved(ws) == ["gpu-01", "gpu-02"]


def test_shrinking_releases_an_idle_node_and_keeps_the_busy_one(alice, bob, run_scheduler, db):
    make_node("gpu-01"), make_node("gpu-02")
    ws = make_workspace(alice, node_count=2)
    job = create_job(alice, name="busy", workspace=ws, **WHOLE_NODE)
    run_scheduler()
    ws = actions.resize_workspace(ws.pk, 1)
    assert ws.status == "Deployed"
    assert reserved(ws) == node_of(job)
    # the released node is back in the shared pool
    bobs = create_job(bob, name="bobs", **WHOLE_NODE)
    run_scheduler()
    assert node_of(bobs) != node_of(job)


def test_shrinking_with_drain_releases_the_busy_node_when_its_job_ends(alice, bob, run_scheduler, db):
    ws, (first, second) = _workspace_with_two_busy_nodes(alice, run_scheduler)
    ws = actions.resize_workspace(ws.pk, 1, when_busy="drain")
    assert ws.status == "Updating"
    assert ws.status_reason == "Draining gpu-01: released when job-1 end(s)"
    assert WorkspaceNode.objects.get(node_name="gpu-01", released_at__isnull=True).draining
    # a new job of the workspace does not go to the draining node
    third = create_job(alice, name="job-3", workspace=ws, gpus_per_node=4, memory_gb=1024)
    run_scheduler()
    assert node_of(third) == ["gpu-02"]  # gpu-01 has 4 free GPUs too, but it is draining
    finish(first)
    reconcile_now()
    ws.refresh_from_db()
    assert ws.status == "Deployed" and reserved(ws) == ["gpu-02"]
    bobs = create_job(bob, name="bobs", **WHOLE_NODE)
    run_scheduler()
    assert node_of(bobs) == ["gpu-01"]


def test_a_workspace_cannot_shrink_below_a_job_that_needs_more_nodes(alice, nodes):
    ws = make_workspace(alice, node_count=3)
    create_job(alice, name="wide", workspace=ws, node_count=3, **WHOLE_NODE)
    with pytest.raises(actions.ResizeRefused, match="Job wide in this workspace needs 3 nodes"):
        actions.resize_workspace(ws.pk, 2, when_busy="drain")


def test_cancelling_stops_its_jobs_then_releases_the_nodes_and_keeps_the_bill(alice, run_scheduler, db):
    make_node("gpu-01")
    ws = make_workspace(alice, node_count=1)
    job = create_job(alice, name="inside", workspace=ws, **WHOLE_NODE)
    waiting = create_job(alice, name="queued", workspace=ws, **WHOLE_NODE)
    run_scheduler()
    assert actions.cancel_workspace(ws.pk) == "terminating"
    ws.refresh_from_db()
    job.refresh_from_db(), waiting.refresh_from_db()
    assert ws.status == "Terminating" and ws.status_reason == "Waiting for 1 job(s) to stop"
    assert job.status == "Stopped" and job.status_reason == "Training Workspace team-ws was cancelled"
    assert waiting.status == "Stopped"
    assert reserved(ws) == ["gpu-01"]  # until the agent has stopped the process
    from jobs.models import Placement

    Placement.objects.filter(attempt__job=job).update(state="exited")
    reconcile_now()
    assert not Workspace.objects.filter(pk=ws.pk).exists()
    assert not WorkspaceNode.objects.filter(released_at__isnull=True).exists()
    assert UsageArchive.objects.filter(kind="workspace", name="team-ws", owner=alice).count() == 1
    job.refresh_from_db()
    assert job.workspace is None and job.billing.workspace_name == "team-ws"


def test_cancelling_an_idle_workspace_deletes_it_at_once(alice, nodes):
    ws = make_workspace(alice, node_count=2)
    assert actions.cancel_workspace(ws.pk) == "deleted"
    assert not Workspace.objects.exists()


def test_a_lost_reserved_node_puts_the_workspace_in_error_until_it_returns(alice, nodes):
    ws = make_workspace(alice, node_count=1)
    Node.objects.filter(name="gpu-01").update(lost=True, connected=False)
    reconcile_now()
    ws.refresh_from_db()
    assert ws.status == "Error" and ws.status_reason == "gpu-01 is lost (no heartbeat)"
    Node.objects.filter(name="gpu-01").update(lost=False, connected=True)
    reconcile_now()
    ws.refresh_from_db()
    assert ws.status == "Deployed"
