"""`/api/v1/training-jobs/{id}/metrics/`: per-GPU lines, statistics, periods, CSV, errors."""

from __future__ import annotations

import csv
import io

import pytest

from jobs.tests.factories import api_client
from monitoring import rollup_runs

from .conftest import NOW, gpu_samples, store

pytestmark = pytest.mark.django_db


@pytest.fixture
def job_with_samples(make_job, settings):
    """Alice's job on node-a GPUs 0 and 1, one sample every 10 s for the last 20 minutes, loss on master."""
    settings.METRICS_RAW_RETENTION_DAYS = 3650  # NOW is a fixed date in the past
    job = make_job()
    for gpu, base in ((0, 50.0), (1, 80.0)):
        store("node-a", gpu_samples("GPUUtilization", job.pk, "node-a", gpu,
                                    [(NOW - 1200 + i * 10, base + i % 3) for i in range(120)]), now=NOW)
    store("node-a", [["TrainingLoss", NOW - 1200 + i * 60, 2.0 - i / 10, {"job": job.pk, "stream": "master"}] for i in range(20)], now=NOW)
    # another job on the same node: never part of Alice's answer
    other = make_job(name="other-job")
    store("node-a", gpu_samples("GPUUtilization", other.pk, "node-a", 2, [(NOW - 600, 1.0)]), now=NOW)
    return job


def get(user, job, **params):
    return api_client(user).get(f"/api/v1/training-jobs/{job.pk}/metrics/", params)


def test_it_returns_one_line_per_gpu_with_the_primary_statistic(alice, job_with_samples):
    response = get(alice, job_with_samples, metric="GPUUtilization", start=NOW - 1200, end=NOW, period=300)
    assert response.status_code == 200
    body = response.json()
    assert (body["metric"], body["unit"], body["statistic"], body["period"], body["source"]) == (
        "GPUUtilization", "Percent", "Average", 300, "raw")
    assert [(s["label"], s["dimensions"]) for s in body["series"]] == [
        ("node-a GPU 0", {"node": "node-a", "gpu": 0}), ("node-a GPU 1", {"node": "node-a", "gpu": 1})]
    first = body["series"][0]["points"]
    assert len(first) == 4 and first[0]["timestamp"] == "2025-03-10T11:40:00Z"
    # 30 samples per 5 minutes: 50, 51, 52, 50, … → average 51, and 30 samples
    assert (first[0]["value"], first[0]["sample_count"]) == (pytest.approx(51.0), 30)


def test_the_lines_of_simulated_gpus_say_so(alice, job_with_samples):
    from jobs.models import Node, NodeGPU, ServerType

    node = Node.objects.create(name="node-a", server_type=ServerType.objects.get(name="g2"), address="127.0.0.1")
    NodeGPU.objects.bulk_create([NodeGPU(node=node, index=i, uuid=f"GPU-sim-node-a-{i}", model="H100", memory_gb=80) for i in (0, 1)])
    body = get(alice, job_with_samples, metric="GPUUtilization", start=NOW - 1200, end=NOW, period=300).json()
    assert [(s["label"], s["simulated"]) for s in body["series"]] == [
        ("node-a GPU 0 (simulated)", True), ("node-a GPU 1 (simulated)", True)]
    # real GPUs (NVML's UUIDs) are not labelled; training metrics are the script's own
    NodeGPU.objects.filter(node=node).update(uuid="GPU-5e3c1f6a-0d2b-4c1e-9f7a-2b8d3e4f5a6b")
    body = get(alice, job_with_samples, metric="GPUUtilization", start=NOW - 1200, end=NOW, period=300).json()
    assert [(s["label"], s["simulated"]) for s in body["series"]] == [("node-a GPU 0", False), ("node-a GPU 1", False)]
    [loss] = get(alice, job_with_samples, metric="TrainingLoss", start=NOW - 1200, end=NOW, period=60).json()["series"]
    assert (loss["label"], loss["simulated"]) == ("master", False)


def test_the_statistic_and_a_gpu_filter_can_be_chosen(alice, job_with_samples):
    body = get(alice, job_with_samples, metric="GPUUtilization", statistic="Maximum", gpu=1,
               start="2025-03-10T11:40:00Z", end="2025-03-10T12:00:00Z", period=1200).json()
    assert [s["label"] for s in body["series"]] == ["node-a GPU 1"]
    assert body["series"][0]["points"] == [{"timestamp": "2025-03-10T11:40:00Z", "value": 82.0, "sample_count": 120}]


def test_training_metrics_come_one_line_per_stream(alice, job_with_samples):
    body = get(alice, job_with_samples, metric="TrainingLoss", start=NOW - 1200, end=NOW, period=60).json()
    [line] = body["series"]
    assert line["dimensions"] == {"stream": "master"} and len(line["points"]) == 20
    assert line["points"][-1]["value"] == pytest.approx(0.1)


def test_long_ranges_are_read_from_the_five_minute_roll_ups(alice, job_with_samples):
    rollup_runs.run_rollup()
    body = get(alice, job_with_samples, metric="GPUUtilization", start=NOW - 7 * 86400, end=NOW, period=3600).json()
    assert body["source"] == "rollup"
    point = body["series"][0]["points"][-1]
    assert (point["timestamp"], point["sample_count"], point["value"]) == ("2025-03-10T11:00:00Z", 120, pytest.approx(51.0))


def test_csv_by_format_parameter_and_by_accept_header(alice, job_with_samples):
    url = f"/api/v1/training-jobs/{job_with_samples.pk}/metrics/"
    params = {"metric": "GPUUtilization", "start": NOW - 600, "end": NOW, "period": 600}
    for response in (api_client(alice).get(url, {**params, "format": "csv"}),
                     api_client(alice).get(url, params, HTTP_ACCEPT="text/csv")):
        assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(response.content.decode())))
        assert [(r["node"], r["gpu"], r["statistic"], r["sample_count"]) for r in rows] == [
            ("node-a", "0", "Average", "60"), ("node-a", "1", "Average", "60")]


@pytest.mark.parametrize(("params", "field", "message"), [
    ({"metric": "Nope"}, "metric", "is not a valid choice"),
    ({"metric": "NodeCPUUtilization"}, "metric", "is not a valid choice"),  # node metrics are for staff
    ({"metric": "GPUUtilization", "statistic": "Median"}, "statistic", "is not a valid choice"),
    ({"metric": "GPUUtilization", "start": "last tuesday"}, "start", "ISO 8601"),
    ({"metric": "GPUUtilization", "period": 7}, "period", "1, 5, 10, 30 or a multiple of 60"),
    ({"metric": "GPUUtilization", "start": NOW - 86400 * 7, "end": NOW, "period": 60}, "period", "multiple of 300"),
    ({"metric": "GPUUtilization", "start": NOW - 3600, "end": NOW, "period": 1}, "period", "at least 3 seconds"),
    ({"metric": "GPUUtilization", "start": NOW, "end": NOW - 60}, "end", "after start"),
])
def test_a_bad_query_says_what_to_change(alice, job_with_samples, params, field, message):
    response = get(alice, job_with_samples, **params)
    assert response.status_code == 400
    assert message in " ".join(response.json()[field])
