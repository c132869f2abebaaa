"""What the `simpleai` client knows of the API without importing it agrees with the console:
the job file's keys are the create serializer's writable fields, its ended statuses are the
terminal ones, and the metrics it summarises are those a job's owner may query."""

from __future__ import annotations

from jobs.api.serializers import TrainingJobSerializer
from jobs.choices import TERMINAL_STATUSES
from monitoring.catalog import JOB_METRICS
from simpleai import jobfile, summary
from simpleai.client import ENDED_STATUSES

# issue 33 phase 2: the job file names these itself (simpleai.jobfile.PROJECT_FIELDS, with `workdir`)
PROJECT_FIELDS = ("workdir_url", "inputs", "from_checkpoint")


def test_the_job_files_keys_are_the_apis_writable_fields_in_its_order():
    writable = [name for name, field in TrainingJobSerializer().fields.items() if not field.read_only]
    assert set(PROJECT_FIELDS) <= set(writable)
    assert list(jobfile.FIELDS) == [name for name in writable if name not in PROJECT_FIELDS]


def test_the_clients_ended_statuses_are_the_terminal_ones():
    assert {str(status) for status in TERMINAL_STATUSES} == ENDED_STATUSES


def test_every_metric_it_summarises_is_one_an_owner_may_query():
    assert set(summary.METRICS) <= {metric.name for metric in JOB_METRICS}
