"""Cost and usage count a Slurm job like an agent job: Slurm's allocation time × its GPUs."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from jobs.models import TrainingJob
from jobs.slurm import sync
from jobs.slurm.models import SlurmJob
from workspaces.pricing import money
from workspaces.usage import bill_queryset, job_bill

from .fakes import cluster, g3_job

pytestmark = pytest.mark.django_db

# a fixed hour in the middle of this month, so the case never straddles a month boundary
BASE = timezone.now().replace(day=10, hour=10, minute=0, second=0, microsecond=0)


def local_time(moment) -> str:
    return moment.astimezone().strftime("%Y-%m-%dT%H:%M:%S")  # how slurmctld writes it (its local time)


def test_a_slurm_job_is_charged_for_its_allocation_time_times_its_gpus(alice, alice_client, fake_slurm, tmp_path):
    fake = fake_slurm
    cluster(jobcomp_path=str(tmp_path / "jobcomp.txt"))
    job = g3_job(alice, name="billed")  # 2 nodes × 4 GPUs at g3's on-demand $6.40 per GPU-hour
    sync.sync_all()
    slurm_id = SlurmJob.objects.get(job=job).slurm_job_id
    fake.set(slurm_id, "RUNNING", start=BASE)
    sync.sync_all()
    fake.set(slurm_id, "COMPLETED", start=BASE, end=BASE + timedelta(minutes=90))
    (tmp_path / "jobcomp.txt").write_text(
        f"JobId={slurm_id} UserId=svc(1000) GroupId=svc(1000) Name=x JobState=COMPLETED Partition=ondemand "
        f"StartTime={local_time(BASE)} EndTime={local_time(BASE + timedelta(minutes=90))} NodeList=n[1-2] ExitCode=0:0\n")
    sync.sync_all()
    assert TrainingJob.objects.get(pk=job.pk).status == "Completed"

    bill = job_bill(bill_queryset().get(pk=job.pk))

    assert bill.total.charged_gpu_hours == 12  # 1.5 h × 8 GPUs
    assert money(bill.total.amount) == Decimal("76.80")
    month = alice_client.get("/usage/").context["selected"]
    assert money(month.by_plan["on_demand"].amount) == Decimal("76.80")
    assert [item.name for item, _ in month.by_item] == ["billed"]
