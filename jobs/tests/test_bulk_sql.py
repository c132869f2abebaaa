"""The bulk SQL the hot paths use: `__any` (one array parameter) selects what `__in` selects, and
insert_each writes one row per position of its arrays."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import actions
from jobs.models import JobStatusChange, TrainingJob
from jobs.sql import bulk

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


AWKWARD_TEXTS = ['say "hi" \\ {x, y}', "NULL", "", "ünïcødé ✓ 训练", "tab\tand\nnewline", "'quoted'", "%s and %(x)s"]


def test_update_each_carries_every_value_as_it_was_sent(alice):
    """The rows travel as one JSON parameter: quotes, backslashes, braces, the word NULL, text
    that looks like a placeholder, non-ASCII, NULL itself, and times with microseconds and
    another offset come back unchanged."""
    from datetime import datetime, timedelta, timezone

    jobs = [actions.create_job(alice, job_fields(name=f"run-{i}"), []) for i in range(len(AWKWARD_TEXTS))]
    at = datetime(2026, 12, 3, 11, 30, 15, 123456, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    changed = bulk.update_each(TrainingJob, [job.pk for job in jobs], {
        "status_reason": ("text", AWKWARD_TEXTS),
        "result_url": ("text", [f"s3://results/{i}" for i in range(len(jobs))]),
        "checkpoint_at": ("timestamptz", [None if i == 0 else at + timedelta(microseconds=i) for i in range(len(jobs))]),
        "started_warm": ("boolean", [i % 2 == 0 for i in range(len(jobs))]),
    }, same={"warm_note": "same for all"})
    assert changed == len(jobs)
    rows = {pk: rest for pk, *rest in TrainingJob.objects.filter(pk__any=[job.pk for job in jobs]).values_list(
        "pk", "status_reason", "result_url", "checkpoint_at", "started_warm", "warm_note")}
    for i, job in enumerate(jobs):
        assert rows[job.pk] == [AWKWARD_TEXTS[i], f"s3://results/{i}",
                                None if i == 0 else at + timedelta(microseconds=i), i % 2 == 0, "same for all"]


def test_update_each_returning_names_only_the_rows_its_condition_let_through(alice):
    first, second = (actions.create_job(alice, job_fields(name=f"run-{i}"), []) for i in range(2))
    TrainingJob.objects.filter(pk=second.pk).update(status="Failed")
    changed = bulk.update_each_returning(
        TrainingJob, [first.pk, second.pk], {"status_reason": ("text", ["new one", "new two"])},
        returning=["owner_id"], where="t.status = ANY(%s)", where_params=[["Pending"]],
    )
    assert changed == [(first.pk, alice.pk)]
    assert TrainingJob.objects.get(pk=second.pk).status_reason != "new two"


def test_a_value_json_cannot_carry_is_refused_before_anything_is_written(alice):
    job = actions.create_job(alice, job_fields(), [])
    with pytest.raises(ValueError):
        bulk.update_each(TrainingJob, [job.pk], {"checkpoint_step": ("double precision", [float("nan")])})
    with pytest.raises(TypeError, match="not a value bulk writes send"):
        bulk.update_each(TrainingJob, [job.pk], {"status_reason": ("text", [object()])})
    with pytest.raises(ValueError, match="ids"):
        bulk.update_each(TrainingJob, [job.pk], {"id": ("bigint", [1])})
