"""The bulk SQL the hot paths use: `__any` (one array parameter) selects what `__in` selects, and
insert_each writes one row per position of its arrays."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import actions, bulk
from jobs.models import JobStatusChange, TrainingJob

from .factories import job_fields

pytestmark = pytest.mark.django_db


def test_any_selects_what_in_selects_with_one_parameter_however_many_values(alice):
    jobs = [actions.create_job(alice, job_fields(name=f"run-{i}"), []) for i in range(3)]
    wanted = [jobs[0].pk, jobs[2].pk, 10**12, *range(10**9, 10**9 + 300)]  # unknown ids too
    with CaptureQueriesContext(connection) as queries:
        found = set(TrainingJob.objects.filter(pk__any=wanted).values_list("pk", flat=True))
    assert found == set(TrainingJob.objects.filter(pk__in=wanted).values_list("pk", flat=True)) == {jobs[0].pk, jobs[2].pk}
    assert "= ANY(" in queries[0]["sql"] and " IN (" not in queries[0]["sql"]
    assert not TrainingJob.objects.filter(pk__any=[]).exists()
    assert set(JobStatusChange.objects.filter(job_id__any={jobs[1].pk}).values_list("job_id", flat=True)) == {jobs[1].pk}


def test_insert_each_writes_a_row_per_position_and_refuses_ragged_columns(alice):
    job = actions.create_job(alice, job_fields(), [])
    inserted = bulk.insert_each(JobStatusChange, {
        "job_id": ("bigint", [job.pk, job.pk]), "old_status": ("text", ["Pending", "Creating"]),
        "new_status": ("text", ["Creating", "Running"]), "reason": ("text", ["placed", "runs"]),
    }, same={"created_at": job.created_at})
    assert inserted == 2
    rows = list(JobStatusChange.objects.filter(job=job).order_by("pk").values_list("old_status", "new_status", "reason"))
    assert rows[-2:] == [("Pending", "Creating", "placed"), ("Creating", "Running", "runs")]
    assert bulk.insert_each(JobStatusChange, {"job_id": ("bigint", []), "reason": ("text", [])}) == 0
    with pytest.raises(ValueError, match="different lengths"):
        bulk.insert_each(JobStatusChange, {"job_id": ("bigint", [job.pk]), "reason": ("text", [])})
