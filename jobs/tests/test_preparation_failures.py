"""A placement that ended because the agent could not prepare it (or deliver its output) says so.

The agent names the failure in its exit report (`failure`); the job's status reason, on the
page and in the API, then tells that cause instead of "No hardware fault signal: exited with
code 1".
"""

from __future__ import annotations

import pytest

from jobs import actions, lifecycle
from jobs.environments.preparation import preparation_decision
from jobs.lifecycle import PlacementReport
from jobs.models import Node, Placement, TrainingJob
from jobs.recovery.faults import Verdict
from jobs.scheduling.decision import Assignment
from monitoring.models import LogLine
from nodeagent.protocol import PREPARATION_FAILURES

from .factories import job_fields
from .test_failover_flow import make_node

pytestmark = pytest.mark.django_db

SCRIPT_MESSAGE = "Could not download the training script s3://scripts/missing.py: no such object"


def test_each_failure_kind_gets_a_verdict_that_names_it():
    decisions = {kind: preparation_decision(kind, "It broke.", "gpu-01", 1, None) for kind in PREPARATION_FAILURES}
    assert decisions["script_download"].verdict is Verdict.USER
    assert decisions["script_download"].reason == "preparation failed on gpu-01: it broke"
    assert decisions["environment"].reason == "preparation failed on gpu-01: it broke"
    assert decisions["image_pull"].verdict is Verdict.IMAGE and decisions["image_pull"].reason == "It broke."
    # a command that failed is the cause; its upload failing afterwards is not
    assert decisions["output_upload"] is None
    upload = preparation_decision("output_upload", "output not uploaded to s3://r/x: access denied", "gpu-01", 0, None)
    assert upload.reason == "output upload failed on gpu-01: output not uploaded to s3://r/x: access denied; the command itself exited with code 0"


def test_without_a_failure_the_commands_exit_is_judged_as_before():
    assert preparation_decision("", "anything", "gpu-01", 1, None) is None


def test_an_acronym_keeps_its_capitals():
    assert preparation_decision("environment", "OUTPUT_DIR is not writable", "n", 1, None).reason == (
        "preparation failed on n: OUTPUT_DIR is not writable"
    )


def placed_job(owner, node: Node, **fields) -> TrainingJob:
    job = actions.create_job(owner, job_fields(**fields), [])
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])
    lifecycle.record_placement(PlacementReport(job.pk, 1, "master", "preparing"), node.pk)
    return TrainingJob.objects.get(pk=job.pk)


def report(job: TrainingJob, node: Node, **fields) -> TrainingJob:
    lifecycle.record_placement(PlacementReport(job.pk, job.current_attempt, "master", "exited", **fields), node.pk)
    job.refresh_from_db()
    return job


def test_a_script_that_cannot_be_downloaded_fails_the_job_with_that_cause(alice, alice_api, alice_client):
    node = make_node("gpu-01")
    job = placed_job(alice, node, script_url="s3://scripts/missing.py")

    job = report(job, node, exit_code=1, message=SCRIPT_MESSAGE, failure="script_download")

    reason = "Preparation failed on gpu-01: could not download the training script s3://scripts/missing.py: no such object"
    assert (job.status, job.status_reason) == ("Failed", reason)
    assert Placement.objects.get(attempt__job=job).failure == "script_download"
    assert alice_api.get(f"/api/v1/training-jobs/{job.pk}/").json()["status_reason"] == reason
    assert reason in alice_client.get(f"/jobs/{job.pk}/").content.decode()
    assert LogLine.objects.filter(job_id=job.pk, text=f"[CONSOLE] master on gpu-01 stopped: {reason[:1].lower()}{reason[1:]}").exists()


def test_with_job_failover_it_is_refused_as_no_hardware_fault_and_still_names_the_cause(alice):
    node = make_node("gpu-01")
    job = placed_job(alice, node, failover_enabled=True)

    job = report(job, node, exit_code=1, message=SCRIPT_MESSAGE, failure="script_download")

    assert job.status == "Pending - internalerror"
    assert job.status_reason == (
        "Preparation failed on gpu-01: could not download the "
        "training script s3://scripts/missing.py: no such object: not a hardware fault, so no failover"
    )
    assert not Node.objects.get(pk=node.pk).cordoned


def test_an_environment_that_cannot_be_prepared_says_so(alice):
    node = make_node("gpu-01")
    job = placed_job(alice, node)

    job = report(job, node, message="the command could not be started: [Errno 2] No such file or directory: 'bash'", failure="environment")

    assert job.status == "Failed"
    assert job.status_reason == "Preparation failed on gpu-01: the command could not be started: [Errno 2] No such file or directory: 'bash'"


def test_an_image_pull_failure_reported_as_a_failure_backs_off(alice):
    node = make_node("gpu-01")
    job = placed_job(alice, node)
    message = "Image pull failed on gpu-01: image not found: team/x:1 does not exist in its registry (check the repository name and the tag)"

    job = report(job, node, message=message, image_error=True, failure="image_pull")

    assert (job.status, job.status_reason) == ("Pending - imagepullbackoff", message)


def test_an_output_that_cannot_be_uploaded_does_not_pass_for_completed(alice):
    node = make_node("gpu-01")
    job = placed_job(alice, node)
    lifecycle.record_placement(PlacementReport(job.pk, 1, "master", "running"), node.pk)

    job = report(job, node, exit_code=0, failure="output_upload",
                 message="output not uploaded to s3://simpleai-results/jobs/1/attempt-1/master: Could not upload model.pt: access denied (403)")

    assert job.status == "Failed"
    assert job.status_reason == (
        "Output upload failed on gpu-01: output not uploaded to s3://simpleai-results/jobs/1/attempt-1/master: "
        "Could not upload model.pt: access denied (403); the command itself exited with code 0"
    )
    assert job.result_url == ""


def test_a_failed_command_whose_upload_also_failed_is_judged_by_the_command(alice):
    node = make_node("gpu-01")
    job = placed_job(alice, node)
    lifecycle.record_placement(PlacementReport(job.pk, 1, "master", "running"), node.pk)

    job = report(job, node, exit_code=3, failure="output_upload", message="output not uploaded to s3://r/x: access denied")

    assert (job.status, job.status_reason) == ("Failed", "The command exited with code 3")
