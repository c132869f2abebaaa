"""A training script URL is checked against object storage when the job is created.

Form and API ask the same function (jobs.script_check) and answer with the same message next
to `script_url`; nothing is created. Real SeaweedFS, real boto3.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from console.services.ports import free_port
from jobs.models import TrainingJob
from jobs.script_check import NOT_CONFIGURED_MESSAGE, script_object_error

from .factories import api_payload, form_post
from .html import field_errors

URL = reverse("jobs:create")
JOBS = "/api/v1/training-jobs/"


def _refusals(alice, alice_client, alice_api, script_url: str) -> tuple[list[str], list[str]]:
    """The form's and the API's messages for `script_url`; neither may create a job."""
    page = alice_client.post(URL, form_post(use_storage="on", volume_mount_path="/mnt/data", script_url=script_url))
    api = alice_api.post(JOBS, api_payload(script_url=script_url), format="json")
    assert page.status_code == 200 and api.status_code == 400, api.content
    assert not TrainingJob.objects.filter(owner=alice).exists()
    errors = field_errors(page.content)
    assert set(errors) == {"script_url"} and set(api.json()) == {"script_url"}
    return errors["script_url"], api.json()["script_url"]


def test_a_script_that_exists_is_accepted_by_form_and_api(alice, alice_client, alice_api, stored_script):
    assert script_object_error(stored_script) is None
    api = alice_api.post(JOBS, api_payload(name="api-job", script_url=stored_script), format="json")
    assert api.status_code == 201, api.json()
    page = alice_client.post(URL, form_post(name="page-job", use_storage="on", volume_mount_path="/mnt/data", script_url=stored_script))
    assert page.status_code == 302
    assert sorted(TrainingJob.objects.filter(owner=alice).values_list("script_url", flat=True)) == [stored_script] * 2


def test_a_missing_object_is_refused_with_the_same_message_in_form_and_api(alice, alice_client, alice_api, stored_script):
    missing = "s3://scripts/not-uploaded.py"
    page, api = _refusals(alice, alice_client, alice_api, missing)
    assert page == api == [
        f"There is no object at {missing}: upload the training script first (e.g. aws s3 cp train.py {missing}), or correct the URL."
    ]


def test_a_missing_bucket_is_named(alice, alice_client, alice_api, stored_script):
    page, api = _refusals(alice, alice_client, alice_api, "s3://no-such-bucket-here/train.py")
    assert page == api == ["There is no bucket no-such-bucket-here in object storage: create it and upload the script, or correct the URL."]


def test_an_object_the_consoles_credentials_cannot_read_is_refused(alice, alice_client, alice_api, stored_script, settings):
    settings.S3_SECRET_KEY = "not-the-secret"
    page, api = _refusals(alice, alice_client, alice_api, stored_script)
    assert page == api == [f"The console's object storage credentials cannot read {stored_script} (access denied)."]


def test_storage_that_does_not_answer_is_said_so(alice, alice_client, alice_api, object_storage_settings):
    object_storage_settings.S3_ENDPOINT_URL = f"http://127.0.0.1:{free_port()}"
    page, api = _refusals(alice, alice_client, alice_api, "s3://scripts/train.py")
    assert page == api == [
        f"Object storage at {object_storage_settings.S3_ENDPOINT_URL} did not answer, so s3://scripts/train.py "
        "could not be checked; try again in a moment."
    ]


def test_without_object_storage_a_script_url_cannot_be_used(alice, alice_client, alice_api, settings):
    settings.S3_ENDPOINT_URL = ""
    page, api = _refusals(alice, alice_client, alice_api, "s3://scripts/train.py")
    assert page == api == [NOT_CONFIGURED_MESSAGE]


@pytest.mark.parametrize("bad", ["https://bucket/train.py", "s3://bucket/"])
def test_a_malformed_url_gets_its_syntax_message_without_asking_storage(alice, alice_client, alice_api, settings, bad):
    settings.S3_ENDPOINT_URL = ""  # would answer NOT_CONFIGURED_MESSAGE if it were asked
    page, api = _refusals(alice, alice_client, alice_api, bad)
    assert page == api and page != [NOT_CONFIGURED_MESSAGE]


def test_no_script_url_needs_no_object_storage(alice, alice_api, settings):
    settings.S3_ENDPOINT_URL = ""
    assert alice_api.post(JOBS, api_payload(), format="json").status_code == 201
