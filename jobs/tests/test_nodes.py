"""Node registry: tokens, heartbeats and the watchdog, cordon, free-GPU accounting."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from jobs import actions, lifecycle
from jobs.models import Node, NodeGPU, NodeToken, Placement, ServerType, TrainingJob
from jobs.nodes import desired, registry
from jobs.nodes.models import hash_token
from jobs.scheduling.capacity import GpuUse
from jobs.scheduling.capacity_load import load_ledger
from jobs.scheduling.decision import Assignment
from jobs.tasks import schedule_jobs

from .factories import api_client, job_fields

pytestmark = pytest.mark.django_db


def make_node(name: str, gpus: int = 8, **fields) -> Node:
    node = Node.objects.create(
        name=name, server_type=ServerType.objects.get(name="g2"), address="127.0.0.1",
        connected=True, last_heartbeat_at=timezone.now(), **fields,
    )
    NodeGPU.objects.bulk_create([NodeGPU(node=node, index=i, uuid=f"{name}-{i}", model="H100", memory_gb=80) for i in range(gpus)])
    return node


def test_nodetoken_prints_a_token_once_and_stores_only_its_hash(capsys):
    call_command("nodetoken", "gpu-01", "--quiet")
    token = capsys.readouterr().out.strip()
    record = NodeToken.objects.get(name="gpu-01")
    assert token.startswith("sat_")
    assert record.token_hash == hash_token(token) and token not in record.token_hash
    assert registry.authenticate(token) == record


def test_nodetoken_s_hint_keeps_the_token_off_the_agent_s_command_line(capsys):
    call_command("nodetoken", "gpu-01")
    out = capsys.readouterr().out
    token = out.splitlines()[1].strip()
    assert f"NODEAGENT_TOKEN={token} python -m nodeagent --console" in out and "--token-file" in out
    assert f"--token {token}" not in out


def test_a_new_token_revokes_the_nodes_old_one():
    _, old = NodeToken.mint("gpu-01")
    _, new = NodeToken.mint("gpu-01")
    with pytest.raises(registry.AgentRefused, match="revoked"):
        registry.authenticate(old)
    assert registry.authenticate(new).name == "gpu-01"


def test_nodetoken_refuses_an_invalid_name():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="Invalid node name"):
        call_command("nodetoken", "Bad Name")


def test_free_gpus_exclude_what_placements_hold_and_cordoned_nodes(alice):
    busy, spare = make_node("gpu-01"), make_node("gpu-02")
    make_node("gpu-03", cordoned=True, cordon_reason="maintenance")
    job = actions.create_job(alice, job_fields(gpus_per_node=2, memory_gb=512), [])
    lifecycle.start_attempt(job.pk, [Assignment(busy.pk, busy.name, (0, 1))])
    ledger = load_ledger()
    free = {n.node.name: sorted(n.indices(GpuUse.FREE)) for n in ledger.nodes.values() if n.schedulable}
    assert free == {"gpu-01": [2, 3, 4, 5, 6, 7], "gpu-02": list(range(8))}
    assert {i: s.hold.job_name for i, s in ledger.node(busy.pk).gpus.items() if s.hold} == {0: "llama-finetune", 1: "llama-finetune"}
    assert busy.status() == "Busy" and spare.status() == "Ready"


def test_the_scheduler_places_a_waiting_job_and_explains_one_that_cannot_fit(alice, django_capture_on_commit_callbacks):
    make_node("gpu-01")
    with django_capture_on_commit_callbacks():
        small = actions.create_job(alice, job_fields(name="small"), [])
        big = actions.create_job(alice, job_fields(name="big", gpus_per_node=8, memory_gb=2048, node_count=2), [])
    schedule_jobs()
    small.refresh_from_db()
    big.refresh_from_db()
    assert small.status == "Creating" and small.current_attempt == 1
    assert big.status == "Pending"
    # the only node holds small's GPU: the reason says so, and that one node can never do
    assert big.status_reason == (
        "Waiting for 2 × g2 nodes with 8 free GPUs: 0 fit now; only 1 node of this type exists; "
        "1 GPU in use by your jobs"
    )


def test_a_node_without_heartbeats_is_lost_and_its_job_fails(alice, settings, listening_console):
    node = make_node("gpu-01")
    job = actions.create_job(alice, job_fields(), [])
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])
    silent = timezone.now() - timedelta(seconds=settings.NODE_LOST_AFTER_SECONDS + 1)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=silent, last_sent_at=silent)

    assert registry.watch_heartbeats() == ["gpu-01"]

    node.refresh_from_db()
    job = TrainingJob.objects.get(pk=job.pk)
    assert node.lost and node.status() == "Lost"
    assert job.status == "Failed"
    assert job.status_reason == "Node gpu-01 stopped sending heartbeats"
    assert registry.watch_heartbeats() == []  # idempotent


def test_a_placement_committed_on_a_node_just_declared_lost_is_lost_at_the_next_watch(alice, listening_console):
    """A scheduler run that read the node as online commits after the watchdog declared it Lost:
    its placement must not wait forever for an agent that is gone (a job stuck in Creating)."""
    node = make_node("gpu-01")
    Node.objects.filter(pk=node.pk).update(lost=True, connected=False)  # declared Lost a moment ago
    job = actions.create_job(alice, job_fields(), [])
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])  # the run's late commit

    assert registry.watch_heartbeats() == []  # no node is declared again

    job = TrainingJob.objects.get(pk=job.pk)
    assert job.status == "Failed"
    assert job.status_reason == "Node gpu-01 stopped sending heartbeats"
    assert list(Placement.objects.filter(attempt__job=job).values_list("state", flat=True)) == ["lost"]


def test_cordon_takes_a_node_out_of_scheduling(alice):
    node = make_node("gpu-01")
    actions.set_cordon(node.pk, True, "bad fan")
    node.refresh_from_db()
    assert node.status() == "Cordoned" and node.cordon_reason == "bad fan"
    assert not load_ledger().node(node.pk).schedulable
    actions.set_cordon(node.pk, False)
    assert load_ledger().node(node.pk).schedulable


def test_desired_state_lists_only_current_attempts_of_active_jobs(alice):
    node = make_node("gpu-01")
    job = actions.create_job(alice, job_fields(registry_username="trainer"), [], registry_password="Reg-Pass-1")
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (3,))])
    [placement] = desired.desired_placements(node.pk)
    assert placement["gpu_indices"] == [3] and placement["command"] == "torchrun train.py"
    # the decrypted credentials go to the assigned agent only
    assert placement["registry"] == {"username": "trainer", "password": "Reg-Pass-1"}
    actions.delete_job(job.pk)  # Running/Creating → Terminating: the agent must stop it
    assert desired.desired_placements(node.pk) == []


@pytest.mark.parametrize(("body", "field"), [
    ({"kind": "xid", "xid": 2**40, "gpu_index": 0}, "xid"),  # once "integer out of range" on every re-send
    ({"kind": "xid", "xid": 79, "gpu_index": 2**20}, "gpu_index"),
    ({"kind": "xid", "gpu_index": 0}, "xid"),
])
def test_an_impossible_fault_is_refused_by_the_api_before_reaching_the_agent(staff, body, field):
    node = make_node("gpu-01")
    response = api_client(staff).post(f"/api/v1/nodes/{node.pk}/inject-fault/", body, format="json")
    assert response.status_code == 400 and field in response.json()
