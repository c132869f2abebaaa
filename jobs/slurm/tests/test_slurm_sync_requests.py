"""The Slurm pass, continued: the whole request a submission sends (and the admin shows), the time
limits a cluster allows, the Slurm accounts jobs land in, and accounting read from slurmdbd.

A slurmrestd that answers from memory (fakes.FakeSlurm) stands in for the real one here; the
end-to-end tests drive the same code against real daemons.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobs import actions
from jobs.models import JobAttempt
from jobs.slurm import sync
from jobs.slurm.models import SlurmCluster, SlurmJob
from jobs.tests.factories import job_fields

from .fakes import NOW, g3_job, reload, slurm_id

pytestmark = pytest.mark.django_db


# -- the whole request ----------------------------------------------------------------------------
def test_the_submission_asks_for_the_allocations_memory_cpus_typed_gpus_time_and_the_clusters_rules(alice, local, fake_slurm):
    SlurmCluster.objects.update(gpu_type="b300", constraint="ib", qos="normal", default_time_limit_minutes=120,
                                extra_sbatch_options="--reservation=train")
    half = g3_job(alice, name="half")  # 2 nodes × 4 of 8 GPUs: half of each node
    whole = g3_job(alice, name="whole", gpus_per_node=8, memory_gb=4096, time_limit_minutes=30)

    sync.sync_all()

    (_, first), (_, second) = fake_slurm.submitted
    assert {k: first[k] for k in ("memory_per_node", "cpus_per_task", "gres", "time_limit", "constraints", "qos",
                                  "reservation", "requeue")} == {
        "memory_per_node": 2048 * 1024, "cpus_per_task": 64, "gres": "gpu:b300:4", "time_limit": 120,
        "constraints": "ib", "qos": "normal", "reservation": "train", "requeue": False}
    assert "exclusive" not in first
    assert (second["exclusive"], second["memory_per_node"], second["cpus_per_task"], second["time_limit"]) == (True, 0, 128, 30)
    assert reload(half).status == reload(whole).status == "Pending"


def test_the_admin_shows_the_request_before_it_is_sent(alice, local, fake_slurm, staff_client):
    job = g3_job(alice, failover_enabled=True)

    page = staff_client.get(f"/admin/jobs/trainingjob/{job.pk}/change/").content.decode()

    assert ("sbatch --nodes=2 --ntasks-per-node=1 --cpus-per-task=64 --mem=2097152M --gres=gpu:4 --partition=ondemand "
            "--time=1440 --requeue --job-name=simpleai-") in page
    assert "&quot;no_requeue&quot;" not in page and "SIMPLEAI_LAUNCH_KEY" in page
    assert fake_slurm.submitted == []  # shown, not sent


def test_a_time_limit_over_the_clusters_maximum_is_refused_when_the_job_is_created(alice_api, local):
    SlurmCluster.objects.update(max_time_limit_minutes=600)
    body = {**job_fields(name="long", server_type="g3", gpus_per_node=1, memory_gb=512), "time_limit_minutes": 601}

    response = alice_api.post("/api/v1/training-jobs/", body, format="json")

    assert response.status_code == 400
    assert response.json()["time_limit_minutes"] == ["The time limit of 10 h 1 min is longer than this cluster allows (10 h)."]
    body = {**job_fields(name="agents", server_type="g2"), "time_limit_minutes": 60}
    response = alice_api.post("/api/v1/training-jobs/", body, format="json")
    assert "server type g2 does not" in str(response.json()["time_limit_minutes"])


def test_a_job_whose_time_limit_the_cluster_no_longer_allows_fails_with_the_reason(alice, local, fake_slurm):
    job = g3_job(alice, time_limit_minutes=900)
    SlurmCluster.objects.update(max_time_limit_minutes=600)  # staff lowered it after the job was created

    sync.sync_all()

    assert reload(job).status == "Failed"
    assert reload(job).status_reason == ("Slurm cluster local cannot take the job: The time limit of 15 h is longer than "
                                         "this cluster allows (10 h).")


# -- accounts -------------------------------------------------------------------------------------
def test_users_and_teams_land_in_their_slurm_accounts_and_a_mapped_unix_user_submits_and_cancels(
        alice, bob, carol, team, local, fake_slurm):
    from jobs.slurm.models import SlurmAccount

    SlurmCluster.objects.update(default_account="general")
    SlurmAccount.objects.create(cluster=local, team=team, account="team-a")  # Alice and Carol
    SlurmAccount.objects.create(cluster=local, user=carol, account="carol-lab", unix_user="carol")
    jobs = [g3_job(user, name=f"{user.username}-job") for user in (alice, bob, carol)]

    sync.sync_all()

    assert [p["account"] for _, p in fake_slurm.submitted] == ["team-a", "general", "carol-lab"]
    assert [SlurmJob.objects.get(job=j).run_as for j in jobs] == ["", "", "carol"]
    assert "carol" in fake_slurm.users  # her job went in with her token: Slurm runs it as her
    fake_slurm.users.clear()
    actions.delete_job(jobs[2].pk)
    sync.sync_all()
    assert fake_slurm.cancelled == [slurm_id(jobs[2])] and fake_slurm.users[-1] == "carol"


# -- accounting -----------------------------------------------------------------------------------
def test_with_accounting_an_ended_jobs_usage_is_read_from_slurmdbd_and_fills_a_missing_completion_record(alice, local, fake_slurm):
    from jobs.slurm.adapters import AccountingView

    SlurmCluster.objects.update(accounting=True)
    job = g3_job(alice)
    sync.sync_all()
    sid = slurm_id(job)
    fake_slurm.set(sid, "RUNNING")
    sync.sync_all()

    # slurmctld forgot it and no completion record names it (jobcomp unreadable here): slurmdbd's word
    del fake_slurm.views[sid]
    fake_slurm.accounted[sid] = AccountingView(sid, "COMPLETED", "team-a", "svc", 3600, "cpu=128,mem=4194304M,node=2,gres/gpu=8",
                                               NOW, NOW + timedelta(hours=1), ("n1", "n2"))
    sync.sync_all()

    job = reload(job)
    assert job.status == "Completed"
    run = JobAttempt.objects.get(job=job).slurm_run
    assert (run.state, run.ended_at - run.started_at) == ("COMPLETED", timedelta(hours=1))
    row = SlurmJob.objects.get(job=job)
    assert (row.accounted_state, row.elapsed_seconds, row.account) == ("COMPLETED", 3600, "team-a")
    assert row.allocated_tres.endswith("gres/gpu=8")
