"""The Slurm pass: submission, Slurm's states carried out on the job, deletions, and the scheduler's hook.

A slurmrestd that answers from memory (fakes.FakeSlurm) stands in for the real one here; the
end-to-end tests drive the same code against real daemons.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from jobs import actions
from jobs.models import JobAttempt, Node, NodeGPU, Placement, ServerType, TrainingJob
from jobs.slurm import submit, sync
from jobs.slurm.client import SlurmRefused, SlurmUnreachable
from jobs.slurm.models import SlurmCluster, SlurmJob
from jobs.tasks import schedule_jobs

from .fakes import NOW, g3_job, jobcomp, record, reload, slurm_id

pytestmark = pytest.mark.django_db


# -- submission ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("fields", "partition", "requeue"), [
    ({}, "ondemand", False),
    ({"failover_enabled": True}, "ondemand", True),
    ({"learning_type": "spot"}, "spot", True),
])
def test_a_waiting_job_is_submitted_once_with_its_shape_and_partition(alice, local, fake_slurm, fields, partition, requeue):
    job = g3_job(alice, **fields)

    sync.sync_all()
    sync.sync_all()

    assert len(fake_slurm.submitted) == 1
    script, properties = fake_slurm.submitted[0]
    assert properties["nodes"] == 2 and properties["gres"] == "gpu:4"
    assert properties["partition"] == partition and properties["requeue"] is requeue
    assert "srun" in script and "nodeagent.slurm_step run" in script
    job = reload(job)
    assert job.status == "Pending"
    assert job.status_reason == f"Slurm job {slurm_id(job)} on local: queued; Slurm has not looked at it yet"
    # the launch key is in the job's environment; the console keeps only its hash
    key = properties["environment"]["SIMPLEAI_LAUNCH_KEY"]
    assert key not in SlurmJob.objects.get(job=job).launch_key_hash


def test_slurms_refusal_fails_the_job_with_slurms_words(alice, local, fake_slurm):
    fake_slurm.refuse = SlurmRefused("Requested node configuration is not available")
    job = g3_job(alice)

    sync.sync_all()

    job = reload(job)
    assert job.status == "Failed"
    assert job.status_reason == "Slurm cluster local refused the job: Requested node configuration is not available"
    assert list(job.status_changes.values_list("new_status", flat=True)) == ["Pending", "Failed"]


def test_an_unreachable_cluster_keeps_the_job_waiting_and_says_why(alice, local, fake_slurm):
    fake_slurm.error = SlurmUnreachable("slurmrestd at http://fake_slurm.test:6820 is unreachable: [Errno 111] Connection refused")
    job = g3_job(alice)

    sync.sync_all()

    job = reload(job)
    assert job.status == "Pending"
    assert job.status_reason == ("Waiting for Slurm cluster local: slurmrestd at http://fake_slurm.test:6820 is unreachable: "
                                 "[Errno 111] Connection refused; retrying")
    assert "Connection refused" in SlurmCluster.objects.get().last_error

    fake_slurm.error = None
    sync.sync_all()
    assert reload(job).status_reason.startswith("Slurm job ")
    assert SlurmCluster.objects.get().last_error == ""


def test_a_job_asking_more_gpus_per_node_than_the_nodes_have_fails(alice, local, fake_slurm):
    SlurmCluster.objects.update(gpus_per_node=2)  # staff changed the cluster after the job was created
    job = g3_job(alice)

    sync.sync_all()

    assert reload(job).status_reason == "Slurm cluster local has 2 GPUs per node; the job asks for 4"
    assert fake_slurm.submitted == []


def test_a_submission_the_console_could_not_record_is_adopted_not_repeated(alice, local, fake_slurm):
    job = g3_job(alice)
    sync.sync_all()
    SlurmJob.objects.update(slurm_job_id=None)  # as if the console stopped right after submitting

    sync.sync_all()

    assert len(fake_slurm.submitted) == 1
    assert slurm_id(job) == 101


def test_disabled_clusters_submit_nothing(alice, local, fake_slurm):
    SlurmCluster.objects.update(enabled=False)
    g3_job(alice)
    sync.sync_all()
    assert fake_slurm.submitted == []


def test_a_job_over_its_owners_gpu_quota_waits_in_the_console_not_in_slurm(alice, local, fake_slurm):
    from workspaces.models import Quota

    Quota.objects.create(user=alice, max_gpus_in_use=8)
    first = g3_job(alice, name="first")  # 2 nodes × 4 GPUs: the whole quota
    second = g3_job(alice, name="second")

    sync.sync_all()

    assert [properties["name"] for _, properties in fake_slurm.submitted] == [f"simpleai-{first.pk}-first"]
    assert reload(second).status_reason == ("Waiting for your GPU quota: 8 of 8 GPUs in use, this job needs 8 "
                                            "(quota: maximum GPUs in use at once)")
    fake_slurm.set(slurm_id(first), "COMPLETED")
    jobcomp(local, record(slurm_id(first), "COMPLETED"))
    sync.sync_all()  # the first one ends…
    sync.sync_all()  # …and the second one goes to Slurm
    assert len(fake_slurm.submitted) == 2


# -- following Slurm ---------------------------------------------------------------------------
def test_the_job_follows_slurm_from_queued_to_completed_with_the_records_exit_code(alice, local, fake_slurm):
    job = g3_job(alice)
    sync.sync_all()
    sid = slurm_id(job)

    fake_slurm.set(sid, "PENDING", "Priority", nodes=())
    sync.sync_all()
    assert reload(job).status_reason == f"Slurm job {sid} on local: queued behind jobs of higher priority in partition ondemand"

    fake_slurm.set(sid, "RUNNING")
    sync.sync_all()
    job = reload(job)
    assert job.status == "Creating"
    attempt = JobAttempt.objects.get(job=job)
    assert attempt.master_addr == "10.0.0.1"  # the first host's NodeAddr
    placements = list(Placement.objects.filter(attempt=attempt).order_by("node_rank"))
    assert [(p.node_name, p.role, p.node, p.started_at) for p in placements] == [
        ("n1", "master", None, NOW), ("n2", "worker-1", None, NOW)]

    fake_slurm.set(sid, "COMPLETED")
    jobcomp(local, record(sid, "COMPLETED"))
    sync.sync_all()

    job = reload(job)
    assert job.status == "Completed"
    run = attempt.slurm_run
    run.refresh_from_db()
    assert (run.state, run.exit_code) == ("COMPLETED", 0)
    # the allocation's end from the record is where billing stops
    assert {p.ended_at for p in Placement.objects.filter(attempt=attempt)} == {run.ended_at}
    assert run.ended_at - run.started_at == timedelta(hours=1)
    assert SlurmJob.objects.get(job=job).finished_at is not None


def test_an_out_of_memory_kill_fails_the_job_saying_so(alice, local, fake_slurm):
    job = g3_job(alice)
    sync.sync_all()
    sid = slurm_id(job)
    fake_slurm.set(sid, "RUNNING")
    sync.sync_all()

    fake_slurm.set(sid, "OUT_OF_MEMORY")
    jobcomp(local, record(sid, "OUT_OF_MEMORY", "0:125"))
    sync.sync_all()

    job = reload(job)
    assert job.status == "Failed"
    assert job.status_reason == "Out of memory: the job exceeded its memory on n1, n2 (Slurm OUT_OF_MEMORY)"


def test_the_fourth_node_failure_gives_up_and_cancels_the_requeued_job(alice, local, fake_slurm):
    job = g3_job(alice, failover_enabled=True)
    sync.sync_all()
    sid = slurm_id(job)
    fake_slurm.set(sid, "RUNNING")
    sync.sync_all()
    TrainingJob.objects.filter(pk=job.pk).update(failover_count=3)

    fake_slurm.set(sid, "PENDING", "BeginTime", restart=1, nodes=())
    fake_slurm.down = {"n1": "idle", "n2": "down*"}
    jobcomp(local, record(sid, "NODE_FAIL", "0:0"))
    sync.sync_all()

    job = reload(job)
    assert job.status == "Pending - maxretriesexceeded"
    assert job.status_reason == "3 failovers done; not running it again after node n2 failed (Slurm NODE_FAIL)"
    assert fake_slurm.cancelled == [sid]


def test_deleting_a_queued_job_cancels_it_in_slurm(alice, local, fake_slurm):
    job = g3_job(alice)
    sync.sync_all()
    sid = slurm_id(job)

    assert actions.delete_job(job.pk) == "deleted"
    sync.sync_all()
    assert fake_slurm.cancelled == [sid]

    fake_slurm.set(sid, "CANCELLED", nodes=())
    sync.sync_all()
    assert SlurmJob.objects.get(training_job_id=job.pk).finished_at is not None


def test_deleting_a_running_job_waits_for_slurm_to_end_it(alice, local, fake_slurm):
    job = g3_job(alice)
    sync.sync_all()
    sid = slurm_id(job)
    fake_slurm.set(sid, "RUNNING")
    sync.sync_all()

    assert actions.delete_job(job.pk) == "terminating"
    sync.sync_all()
    assert fake_slurm.cancelled == [sid] and reload(job).status == "Terminating"
    sync.sync_all()
    assert fake_slurm.cancelled == [sid]  # not repeated within CANCEL_RESEND_SECONDS

    fake_slurm.set(sid, "CANCELLED")
    sync.sync_all()
    assert not TrainingJob.objects.filter(pk=job.pk).exists()


def test_a_job_cancelled_in_slurm_by_someone_else_fails(alice, local, fake_slurm):
    job = g3_job(alice)
    sync.sync_all()
    sid = slurm_id(job)

    fake_slurm.set(sid, "CANCELLED", nodes=())
    sync.sync_all()

    job = reload(job)
    assert job.status == "Failed"
    assert job.status_reason == "Cancelled in Slurm outside the console (scancel by an operator or a Slurm limit)"


# -- the scheduler's hook ------------------------------------------------------------------------
def test_the_agents_scheduler_never_places_a_slurm_served_job_on_an_agent_node(alice, local, fake_slurm, monkeypatch):
    node = Node.objects.create(name="agent-g3", server_type=ServerType.objects.get(name="g3"), address="10.1.1.1", connected=True)
    NodeGPU.objects.bulk_create([NodeGPU(node=node, index=i, uuid=f"u{i}", model="B300", memory_gb=288) for i in range(8)])
    job = g3_job(alice, node_count=1)
    calls = []
    monkeypatch.setattr("jobs.slurm.backend.current_app.send_task", lambda name, *a, **k: calls.append(name))

    result = schedule_jobs()

    assert result == {"placed": 0, "waiting": 0, "preempted": 0, "released": 0}
    assert not Placement.objects.filter(node=node).exists()
    assert reload(job).status == "Pending"
    # …the Slurm pass is asked to submit it instead, as the run reads it (not after the run's commit)
    assert "jobs.slurm.tasks.sync_slurm" in calls


def test_a_new_slurm_job_asks_for_the_slurm_pass_itself_and_an_agents_job_for_the_scheduler(
        alice, local, fake_slurm, monkeypatch, django_capture_on_commit_callbacks):
    asked = []
    monkeypatch.setattr("jobs.slurm.backend.current_app.send_task", lambda name, *a, **k: asked.append(name))
    monkeypatch.setattr("jobs.actions.schedule_on_commit", lambda: asked.append("scheduler run"))

    with django_capture_on_commit_callbacks(execute=True):
        g3_job(alice)
    # straight to the submission pass: no scheduler run (another task hop and its lock) in between
    assert asked == ["jobs.slurm.tasks.sync_slurm"]

    asked.clear()
    SlurmCluster.objects.filter(pk=local.pk).update(enabled=False)
    with django_capture_on_commit_callbacks(execute=True):
        g3_job(alice, name="cluster-off")
    assert asked == ["scheduler run"]  # a disabled cluster's job is the scheduler's to hold (and say why)


def test_a_batch_script_that_fails_before_its_launchers_start_says_where_its_output_is(alice, local, fake_slurm):
    job = g3_job(alice)
    sync.sync_all()
    sid = slurm_id(job)

    fake_slurm.set(sid, "FAILED")
    jobcomp(local, record(sid, "FAILED", "1:0"))
    sync.sync_all()

    job = reload(job)
    assert job.status == "Failed"
    assert job.status_reason == (f"The batch script failed before the step launchers started (the command failed on n1, n2 "
                                 f"(Slurm FAILED, exit code 1)); its output is /var/tmp/simpleai/slurm-{sid}.out on the job's first node")


# -- Slurm's answers, read right ------------------------------------------------------------------
DRAINED = "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"


def test_a_job_slurm_queues_with_an_error_beside_its_id_waits_and_follows_slurms_reasons(alice, local, fake_slurm):
    # what slurmctld answers with a node drained: an error *and* a job id; the job is queued, not refused
    fake_slurm.warnings = ("Required node not available (down, drained or reserved)",)
    job = g3_job(alice)

    submit.submit_waiting(local, fake_slurm, {})

    job = reload(job)
    sid = slurm_id(job)
    assert job.status == "Pending"
    assert job.status_reason == (f"Submitted to Slurm cluster local as job {sid} "
                                 "(Slurm: Required node not available (down, drained or reserved))")

    fake_slurm.set(sid, "PENDING", "Resources", nodes=(), description=DRAINED)
    sync.sync_all()
    assert reload(job).status_reason.startswith(f"Slurm job {sid} on local: waiting for nodes of partition ondemand: "
                                                "some are down, drained for maintenance")
    fake_slurm.set(sid, "PENDING", "PartitionNodeLimit", nodes=())
    sync.sync_all()
    assert reload(job).status_reason.startswith(f"Slurm job {sid} on local: partition ondemand cannot give it 2 nodes now")
    fake_slurm.set(sid, "PENDING", "Priority", nodes=())  # the node resumed; others are ahead
    sync.sync_all()
    assert reload(job).status_reason == f"Slurm job {sid} on local: queued behind jobs of higher priority in partition ondemand"
    assert reload(job).status == "Pending" and fake_slurm.cancelled == []


def test_a_failover_that_slurm_requeued_and_held_says_it_needs_a_release(alice, local, fake_slurm):
    job = g3_job(alice, failover_enabled=True)
    sync.sync_all()
    sid = slurm_id(job)
    fake_slurm.set(sid, "RUNNING")
    sync.sync_all()
    fake_slurm.set(sid, "PENDING", "BeginTime", restart=1, nodes=())
    jobcomp(local, record(sid, "NODE_FAIL"))
    sync.sync_all()
    assert reload(job).status == "Pending - failoverinprogress"

    fake_slurm.set(sid, "PENDING", "launch failed requeued held", restart=1, nodes=())
    sync.sync_all()

    job = reload(job)
    assert job.status == "Pending - failoverinprogress"
    assert job.status_reason == (
        f"Slurm job {sid} on local: held by Slurm after its batch script failed to launch on a node (check the node "
        f"first): it does not start until an operator releases it in the admin (Slurm jobs → Release held jobs) or "
        f"with scontrol release {sid}")


def test_strays_the_console_forgot_are_cancelled_and_a_lost_submission_is_adopted(alice, local, fake_slurm, caplog):
    forgotten, lost = g3_job(alice, name="forgotten"), g3_job(alice, name="lost")
    sync.sync_all()
    stray, adopted = slurm_id(forgotten), slurm_id(lost)
    # the row of the first one was finished by mistake (as the old code did on a drained node) and
    # the job deleted; the second's id was never recorded
    SlurmJob.objects.filter(slurm_job_id=stray).update(finished_at=NOW)
    actions.delete_job(forgotten.pk)
    SlurmJob.objects.filter(slurm_job_id=adopted).update(slurm_job_id=None)
    TrainingJob.objects.filter(pk=lost.pk).update(status_reason="")
    # another console's job on the same cluster, and one that is no console's at all
    other = dataclasses.replace(fake_slurm.views[stray], job_id=999, comment=f"Simple AI Training job {lost.pk} (via http://other:8000)")
    fake_slurm.views[999] = other
    fake_slurm.views[998] = dataclasses.replace(other, job_id=998, name="someone-elses-job", comment="")

    with caplog.at_level("WARNING", logger="jobs.slurm.sync"):
        sync.sync_all()

    assert fake_slurm.cancelled == [stray]
    assert slurm_id(lost) == adopted and reload(lost).status_reason.startswith(f"Submitted to Slurm cluster local as job {adopted}")
    assert f"cancelled stray Slurm job {stray} (PENDING) of job {forgotten.pk}" in caplog.text
    assert f"adopted Slurm job {adopted} as the submission of job {lost.pk}" in caplog.text
    sync.sync_all()
    assert fake_slurm.cancelled == [stray]  # not again while Slurm ends it
