"""The step launchers' side of the console: the launch-key redemption and the run-scoped WebSocket.

A run's token lets a launcher write its own job, attempt and node role, nothing else.
"""

from __future__ import annotations

import functools
import json
import time
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from console.asgi import application
from jobs import actions
from jobs.models import JobAttempt, TrainingJob
from jobs.slurm import runs, sync
from jobs.slurm.models import SlurmJob, SlurmRun
from jobs.storage import credentials
from jobs.storage.credentials import checkpoint_signing_key
from jobs.tests.ws import settled
from monitoring.models import LogLine, MetricSeries
from nodeagent.protocol import CLOSE_BAD_TOKEN
from nodeagent.slurm_protocol import REDEEM_PATH, STEP_PATH

from .fakes import cluster, g3_job

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


@pytest.fixture
def submitted(alice, fake_slurm):
    """A 2-node job submitted to the cluster (Slurm job 101); returns (job, launch key)."""
    cluster()
    job = g3_job(alice, failover_enabled=True)
    sync.sync_all()
    return TrainingJob.objects.get(pk=job.pk), fake_slurm.submitted[0][1]["environment"]["SIMPLEAI_LAUNCH_KEY"]


def redeem(key: str, job_id: int, restart: int = 0, slurm_job_id: int = 101, nodelist: str = "n[1-2]"):
    body = {"job_id": job_id, "slurm_job_id": slurm_job_id, "restart_count": restart, "nodelist": nodelist}
    return Client().post(REDEEM_PATH, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}")


# -- redemption ----------------------------------------------------------------------------------
def test_the_launch_key_buys_a_token_for_this_run_and_starts_its_attempt(submitted, fake_slurm):
    job, key = submitted
    fake_slurm.set(101, "RUNNING")

    answer = redeem(key, job.pk)

    assert answer.status_code == 201
    assert answer.json()["attempt"] == 1
    run = runs.run_for_token(answer.json()["token"])
    assert run.restart_count == 0 and run.nodes == ["n1", "n2"] and run.attempt.number == 1
    assert TrainingJob.objects.get(pk=job.pk).status == "Creating"


def test_a_runs_storage_keys_outlive_its_end_by_the_steps_stop_grace(submitted, fake_slurm, object_storage_settings):
    """Slurm says a run ended (preempted, cancelled) while its steps still have the stop grace after
    SIGTERM to save a last checkpoint: the attempt's keys are revoked only after it."""
    job, key = submitted
    fake_slurm.set(101, "RUNNING")
    run = runs.run_for_token(redeem(key, job.pk).json()["token"])
    assert run.attempt.storage_access_key  # the same keys of its own as an agent's attempt
    grace = run.slurm_job.cluster.stop_grace_seconds
    ended = timezone.now()
    runs.close_run(run, "PREEMPTED", ended)
    assert credentials.sweep().revoked == []
    SlurmRun.objects.filter(pk=run.pk).update(ended_at=ended - timedelta(seconds=grace + 1))
    assert credentials.sweep().revoked == [credentials.identity_name(job.pk, 1)]


def test_a_retried_redemption_of_the_same_run_gets_the_same_token(submitted, fake_slurm):
    """The batch step asks again when an answer is late; the token the first answer carried (to
    launchers that may already hold it) must keep working."""
    job, key = submitted
    fake_slurm.set(101, "RUNNING")
    first = redeem(key, job.pk).json()["token"]

    second = redeem(key, job.pk).json()["token"]

    assert first == second and runs.run_for_token(first) is not None
    assert JobAttempt.objects.filter(job=job).count() == 1


def test_a_requeued_run_redeemed_before_the_poll_saw_it_fails_over_first(submitted, fake_slurm):
    job, key = submitted
    fake_slurm.set(101, "RUNNING")
    redeem(key, job.pk)
    fake_slurm.set(101, "RUNNING", restart=1, nodes=("n2", "n3"))  # NODE_FAIL on n1, already running again

    answer = redeem(key, job.pk, restart=1, nodelist="n[2-3]")

    assert answer.status_code == 201 and answer.json()["attempt"] == 2
    job = TrainingJob.objects.get(pk=job.pk)
    assert list(job.status_changes.values_list("new_status", flat=True)) == [
        "Pending", "Creating", "Pending - failoverinprogress", "Creating"]
    assert JobAttempt.objects.get(job=job, number=2).kind == "failover"


@pytest.mark.parametrize(("key", "status"), [("wrong-key", 403), ("", 403)])
def test_a_wrong_launch_key_is_refused(submitted, fake_slurm, key, status):
    job, _ = submitted
    answer = redeem(key, job.pk)
    assert answer.status_code == status and answer.json() == {"error": "unknown job or wrong launch key"}
    assert not SlurmRun.objects.exists()


def test_another_jobs_key_buys_nothing(submitted, fake_slurm, bob):
    job, key = submitted
    other = g3_job(bob, name="bobs")
    sync.sync_all()
    assert redeem(key, other.pk, slurm_job_id=102).status_code == 403


def test_a_malformed_redemption_is_a_400_naming_the_problem(submitted):
    job, key = submitted
    answer = Client().post(REDEEM_PATH, "{not json", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert answer.status_code == 400 and answer.json() == {"error": "the body is not JSON"}
    answer = redeem(key, job.pk, nodelist="n[1-")
    assert answer.status_code == 400 and "malformed request" in answer.json()["error"]


def test_a_run_of_a_deleted_job_is_not_wanted(submitted, fake_slurm):
    job, key = submitted
    fake_slurm.set(101, "RUNNING")
    redeem(key, job.pk)
    actions.delete_job(job.pk)  # Terminating

    answer = redeem(key, job.pk)

    assert answer.status_code == 409
    assert "the job is Terminating" in answer.json()["error"]
    assert fake_slurm.cancelled == [101]


# -- the WebSocket ----------------------------------------------------------------------------
def synced(scenario):
    @functools.wraps(scenario)
    def test(*args, **kwargs):
        return settled(scenario)(*args, **kwargs)

    return test


def hello(node: str) -> dict:
    return {"type": "hello", "protocol": 1, "running": [], "node": {
        "name": node, "server_type": "g3", "address": "10.0.0.9", "cpus": 8, "memory_gb": 64, "runtime": "process",
        "agent_version": "test", "gpus": []}}


async def connect(token: str, node: str) -> tuple[WebsocketCommunicator, dict, dict]:
    socket = WebsocketCommunicator(application, STEP_PATH, headers=[(b"authorization", f"Bearer {token}".encode())])
    connected, _ = await socket.connect()
    assert connected
    await socket.send_json_to(hello(node))
    first = await socket.receive_json_from(timeout=5)
    second = await socket.receive_json_from(timeout=5) if first["type"] == "welcome" else {}
    return socket, first, second


@pytest.fixture
def token(submitted, fake_slurm):
    job, key = submitted
    fake_slurm.set(101, "RUNNING")
    return redeem(key, job.pk).json()["token"]


@synced
async def test_a_launcher_gets_its_nodes_placement_with_the_allocations_first_host_as_master(submitted, token):
    job, _ = submitted
    socket, welcome, desired = await connect(token, "n2")
    # a step holds no object-storage keys of the node: its placement carries its attempt's own
    assert welcome["type"] == "welcome" and "object_storage" not in welcome
    [placement] = desired["placements"]
    assert (placement["role"], placement["node_rank"], placement["nnodes"], placement["nproc_per_node"]) == ("worker-1", 1, 2, 4)
    assert placement["master_addr"] == "10.0.0.1"  # n1's NodeAddr
    assert placement["job_id"] == job.pk and placement["attempt"] == 1
    assert placement["resume_step"] is None and placement["stop_grace_seconds"] == 20
    assert placement["command"] == job.command
    # the same message as an agent's (jobs.nodes.placement_message): the job's signing key, no console keys
    assert placement["env"] == {"CHECKPOINT_SIGNING_KEY": checkpoint_signing_key(job.pk)} and "storage" not in placement
    assert placement["tenant"] == {"id": job.owner_id, "name": "alice"}
    await socket.disconnect()


@synced
async def test_an_unknown_token_is_refused_with_a_reason():
    socket = WebsocketCommunicator(application, STEP_PATH, headers=[(b"authorization", b"Bearer nope")])
    await socket.connect()
    error = await socket.receive_json_from(timeout=5)
    assert error == {"type": "error", "message": "the token is not known to this console, or a newer run of the job replaced it"}
    assert (await socket.receive_output(timeout=5))["code"] == CLOSE_BAD_TOKEN


@synced
async def test_a_node_outside_the_runs_allocation_is_refused(token):
    socket, error, _ = await connect(token, "n7")
    assert error["type"] == "error" and error["message"] == "node 'n7' is not in this run's allocation (n1, n2)"


@synced
async def test_a_launcher_writes_only_its_own_job_attempt_and_stream(submitted, token, bob):
    job, _ = submitted
    other = await sync_to_async(g3_job)(bob, name="bobs")
    socket, _, _ = await connect(token, "n2")
    now = time.time()
    own = {"type": "logs", "msg_id": 1, "job_id": job.pk, "attempt": 1, "stream": "worker-1", "lines": [[1, now, "mine"]]}
    own_metrics = {"type": "metrics", "msg_id": 2, "samples": [["GPUUtilization", now, 60.0, {"gpu": 1, "job": job.pk}]]}
    forged = [
        {**own, "msg_id": 3, "stream": "master", "lines": [[1, now, "as the master"]]},
        {**own, "msg_id": 4, "job_id": other.pk, "lines": [[1, now, "into bob's job"]]},
        {**own, "msg_id": 5, "attempt": 2, "lines": [[1, now, "as a later attempt"]]},
        {"type": "checkpoint", "msg_id": 6, "job_id": other.pk, "attempt": 1, "role": "worker-1", "step": 9, "url": "s3://x"},
        {"type": "metrics", "msg_id": 7, "samples": [["GPUUtilization", now, 50.0, {"gpu": 0, "job": other.pk}]]},
    ]
    for message in (own, own_metrics):
        await socket.send_json_to(message)
        assert (await socket.receive_json_from(timeout=5)) == {"type": "ack", "upto": message["msg_id"]}
    for message in forged:  # refused with a reason, acknowledged so it is not re-sent
        await socket.send_json_to(message)
        error = await socket.receive_json_from(timeout=5)
        assert error["type"] == "error" and error["msg_id"] == message["msg_id"], error
        assert (await socket.receive_json_from(timeout=5)) == {"type": "ack", "upto": message["msg_id"]}
    await socket.disconnect()

    texts = await sync_to_async(lambda: list(LogLine.objects.exclude(text__startswith="[SLURM]").values_list("job_id", "stream", "text")))()
    assert texts == [(job.pk, "worker-1", "mine")]
    series = await sync_to_async(lambda: list(MetricSeries.objects.values_list("job_id", "node", "gpu")))()
    assert series == [(job.pk, "n2", 1)]
    assert (await sync_to_async(TrainingJob.objects.get)(pk=other.pk)).checkpoint_step is None


@synced
async def test_both_nodes_running_make_the_job_running_and_a_later_run_fences_the_old_token(submitted, token, fake_slurm):
    job, key = submitted
    sockets = [(await connect(token, node))[0] for node in ("n1", "n2")]
    for socket, role in zip(sockets, ("master", "worker-1"), strict=True):
        await socket.send_json_to({"type": "attempt", "msg_id": 1, "job_id": job.pk, "attempt": 1, "role": role, "state": "running"})
        await socket.receive_json_from(timeout=5)
    assert (await sync_to_async(TrainingJob.objects.get)(pk=job.pk)).status == "Running"

    fake_slurm.set(101, "RUNNING", restart=1)  # requeued after a node failure, running again
    await sync_to_async(redeem)(key, job.pk, restart=1)
    await sockets[0].send_json_to({"type": "logs", "msg_id": 2, "job_id": job.pk, "attempt": 1, "stream": "master",
                                   "lines": [[5, time.time(), "from the old run"]]})
    await sockets[0].receive_json_from(timeout=5)
    assert not await sync_to_async(LogLine.objects.filter(text="from the old run").exists)()
    for socket in sockets:
        await socket.disconnect()
    # the old run's launchers learn they have nothing left to run
    socket, _, desired = await connect(token, "n1")
    assert desired["placements"] == []
    await socket.disconnect()


def test_the_launch_key_is_stored_only_as_its_hash(submitted):
    job, key = submitted
    row = SlurmJob.objects.get(job=job)
    assert key not in row.launch_key_hash and len(row.launch_key_hash) == 64


# -- the end of a run ----------------------------------------------------------------------------
def test_once_every_nodes_command_has_exited_the_console_polls_slurm_for_the_end_at_once(submitted, fake_slurm, monkeypatch):
    """Slurm ends the job a moment after its launchers exit: the job's outcome waits for the pass
    that sees it, which is asked for then and repeated until Slurm has said it, not a tick later."""
    job, key = submitted
    fake_slurm.set(101, "RUNNING")
    run = runs.run_for_token(redeem(key, job.pk).json()["token"])
    asked = []
    monkeypatch.setattr("jobs.slurm.backend.current_app.send_task", lambda name, *a, **k: asked.append(name))

    runs.record_step(run, "master", "exited", exit_code=0)
    assert asked == [] and not sync.runs_ending()  # the other node still runs its command

    runs.record_step(run, "worker-1", "exited", exit_code=0)
    assert asked == ["jobs.slurm.tasks.sync_slurm"] and sync.runs_ending()

    sync.sync_all()  # Slurm still says RUNNING: the job is not done yet, and the pass keeps looking
    assert TrainingJob.objects.get(pk=job.pk).status != "Completed" and sync.runs_ending()
    fake_slurm.set(101, "COMPLETED", end=timezone.now())
    sync.sync_all()
    assert TrainingJob.objects.get(pk=job.pk).status == "Completed" and not sync.runs_ending()
