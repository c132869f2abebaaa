"""What a Slurm site does every day, against the real daemons: a node drained for maintenance
with jobs queued, a held job an operator releases, a queued job deleted in the console."""

from __future__ import annotations

import pytest

from jobs import actions
from jobs.models import JobAttempt, TrainingJob
from jobs.slurm.models import SlurmJob
from jobs.tests.e2e.helpers import stream_text, wait_for_status
from jobs.tests.e2e.stack import wait_until
from jobs.tests.machine import unavailable

from .cluster import accounting_missing
from .test_slurm_training import history, slurm_job

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def reason_of(job: TrainingJob) -> str:
    return TrainingJob.objects.get(pk=job.pk).status_reason


def slurm_id(job: TrainingJob) -> int:
    return wait_until(lambda: SlurmJob.objects.filter(job_id=job.pk, slurm_job_id__isnull=False)
                      .values_list("slurm_job_id", flat=True).first(), timeout=30, message="a Slurm job id")


@pytest.mark.duration(30)
def test_a_drained_node_keeps_jobs_queued_a_hold_is_released_by_staff_and_a_deleted_one_is_cancelled(
        alice, slurm_cluster, idle_slurm, staff_client):
    idle_slurm.scontrol("update", "nodename=n1", "state=drain", "reason=maintenance")
    try:
        waits = slurm_job(alice, "slurm-drained", "echo after maintenance")
        dropped = slurm_job(alice, "slurm-dropped", "echo never")
        sid, dropped_sid = slurm_id(waits), slurm_id(dropped)

        # Slurm queued both (with an error beside the id): the console says why, in words, and fails neither
        assert "drained" in TrainingJob.objects.get(pk=waits.pk).status_reason  # what Slurm said beside the id…
        wait_until(lambda: reason_of(waits).startswith(f"Slurm job {sid} on local: ") and "drained" in reason_of(waits),
                   timeout=30, message=f"the pending reason, not {reason_of(waits)!r}")  # …then its pending reason
        assert TrainingJob.objects.get(pk=waits.pk).status == "Pending"

        actions.delete_job(dropped.pk)  # deleted while queued: cancelled in Slurm
        wait_until(lambda: idle_slurm.client().job(dropped_sid).state == "CANCELLED", timeout=30, message="CANCELLED")

        idle_slurm.scontrol("hold", str(sid))
        wait_until(lambda: "held by a Slurm administrator" in reason_of(waits), timeout=30, message="the hold")
        assert f"scontrol release {sid}" in reason_of(waits)
        page = staff_client.post("/admin/slurm/slurmjob/", {"action": "release_held", "_selected_action": [
            SlurmJob.objects.get(job=waits).pk]}, follow=True)
        assert [str(m) for m in page.context["messages"]][-1].endswith("released; Slurm schedules it again")
        wait_until(lambda: "held" not in reason_of(waits), timeout=30, message=f"the release, not {reason_of(waits)!r}")
    finally:
        idle_slurm.scontrol("update", "nodename=n1", "state=resume")

    job = wait_for_status(waits.pk, "Completed", "Failed", timeout=60)
    assert job.status == "Completed", job.status_reason
    assert history(job) == ["Pending", "Creating", "Running", "Completed"]
    assert "after maintenance" in stream_text(job.pk, "master")


def scontrol_job(slurm, slurm_job_id: int) -> dict[str, str]:
    """`scontrol show job` as {field: value} (the words of its `Key=Value` pairs)."""
    text = slurm.scontrol("show", "job", str(slurm_job_id))
    return dict(word.split("=", 1) for word in text.split() if "=" in word)


@pytest.mark.duration(20)
def test_memory_cpus_typed_gpus_time_requeue_accounts_and_unix_users_reach_slurm(alice, bob, carol, team, slurm_cluster, idle_slurm):
    from jobs.slurm.models import SlurmAccount, SlurmCluster

    if idle_slurm.accounting:  # the accounts exist in slurmdbd, as on a site (without: any name is taken as given)
        idle_slurm.sacctmgr("add", "account", "team-a", "general", "carol-lab")
        idle_slurm.sacctmgr("add", "user", "root", "account=team-a,general")
        idle_slurm.sacctmgr("add", "user", "nobody", "account=carol-lab")
    SlurmCluster.objects.update(default_account="general")
    SlurmAccount.objects.create(cluster=slurm_cluster, team=team, account="team-a")
    SlurmAccount.objects.create(cluster=slurm_cluster, user=carol, account="carol-lab", unix_user="nobody")
    half = slurm_job(alice, "slurm-half", "echo half", node_count=1, gpus=4, time_limit_minutes=30)
    whole = slurm_job(bob, "slurm-whole", "echo whole", node_count=1, gpus=8, failover_enabled=True)
    as_carol = slurm_job(carol, "slurm-carol", "echo carol", node_count=1, gpus=1)

    ids = {job.name: slurm_id(job) for job in (half, whole, as_carol)}
    half_job, whole_job, carol_job = (scontrol_job(idle_slurm, ids[job.name]) for job in (half, whole, as_carol))

    # half a g3 node: its memory, vCPUs and GPUs (typed: the cluster declares b300), 30 minutes, no requeue
    assert (half_job["MinMemoryNode"], half_job["NumCPUs"], half_job["TresPerNode"]) == ("2T", "64", "gres:gpu:b300:4")
    assert (half_job["TimeLimit"], half_job["Requeue"], half_job["OverSubscribe"]) == ("00:30:00", "0", "OK")
    # a whole node: exclusive with all its memory; Job Failover lets Slurm requeue it; the cluster's default time
    assert (whole_job["OverSubscribe"], whole_job["Requeue"], whole_job["TimeLimit"]) == ("NO", "1", "1-00:00:00")
    assert "mem=4T" in whole_job["TRES"] and whole_job["NumCPUs"] == "128"
    # Alice through her team, Bob by the cluster's default, Carol as her own Unix user
    assert (half_job["Account"], whole_job["Account"], carol_job["Account"]) == ("team-a", "general", "carol-lab")
    assert half_job["UserId"].startswith("root(") and carol_job["UserId"].startswith("nobody(")

    for job in (half, whole):
        assert wait_for_status(job.pk, "Completed", "Failed", timeout=60).status == "Completed"
    actions.delete_job(as_carol.pk)  # (this machine's launcher is not readable by nobody: it would fail)

    if not idle_slurm.accounting:
        unavailable(f"slurmdbd cannot run here: {accounting_missing()}")
    # accounting sees the tenants apart, and the console's usage is Slurm's elapsed time
    records = {name: wait_until(lambda sid=sid: (r := idle_slurm.sacct(sid)) and r["State"] not in ("PENDING", "RUNNING") and r,
                                timeout=30, message="the accounting record") for name, sid in ids.items()}
    assert [(records[n]["User"], records[n]["Account"]) for n in ("slurm-half", "slurm-whole", "slurm-carol")] == [
        ("root", "team-a"), ("root", "general"), ("nobody", "carol-lab")]
    assert "gres/gpu=4" in records["slurm-half"]["AllocTRES"]
    for job in (half, whole):
        run = JobAttempt.objects.get(job=job).slurm_run
        assert (run.ended_at - run.started_at).total_seconds() == int(records[job.name]["ElapsedRaw"])
    # …and the console read the same from slurmdbd (slurmrestd's slurmdb endpoint) into the Slurm job
    row = wait_until(lambda: SlurmJob.objects.filter(job=half, accounted_at__isnull=False).first(), timeout=30,
                     message="the accounting record in the console")
    assert (row.accounted_state, row.account, row.elapsed_seconds) == ("COMPLETED", "team-a", int(records["slurm-half"]["ElapsedRaw"]))
    assert "gres/gpu=4" in row.allocated_tres and "cpu=64" in row.allocated_tres
