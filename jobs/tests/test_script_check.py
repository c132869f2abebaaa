"""A training script URL is checked as its owner when the job is created.

Form and API ask the same function (jobs.storage.checks) and answer with the same message next
to `script_url`; nothing is created. The object must be in the owner's own storage space and
readable with the owner's own keys: another tenant's URL is refused before storage is asked,
and the refusal is in the audit log. Real SeaweedFS, real boto3.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from console.lib.audit import AuditAction, AuditEvent
from console.services.ports import free_port
from jobs.models import TrainingJob
from jobs.storage.checks import NOT_CONFIGURED_MESSAGE, not_yours_message, script_object_error
from jobs.storage.models import bucket_name

from .factories import api_payload, form_post, logged_in
from .html import field_errors
from .storage import put_in_space

URL = reverse("jobs:create")
JOBS = "/api/v1/training-jobs/"


def _refusals(user, client, api, script_url: str) -> tuple[list[str], list[str]]:
    """The form's and the API's messages for `script_url`; neither may create a job."""
    page = client.post(URL, form_post(use_storage="on", volume_mount_path="/mnt/data", script_url=script_url))
    answer = api.post(JOBS, api_payload(script_url=script_url), format="json")
    assert page.status_code == 200 and answer.status_code == 400, answer.content
    assert not TrainingJob.objects.filter(owner=user).exists()
    errors = field_errors(page.content)
    assert set(errors) == {"script_url"} and set(answer.json()) == {"script_url"}
    return errors["script_url"], answer.json()["script_url"]


def test_a_script_in_ones_own_space_is_accepted_by_form_and_api(alice, alice_client, alice_api, stored_script):
    assert stored_script.startswith(f"s3://{bucket_name(alice.pk)}/")
    assert script_object_error(alice, stored_script) is None
    api = alice_api.post(JOBS, api_payload(name="api-job", script_url=stored_script), format="json")
    assert api.status_code == 201, api.json()
    page = alice_client.post(URL, form_post(name="page-job", use_storage="on", volume_mount_path="/mnt/data", script_url=stored_script))
    assert page.status_code == 302
    assert sorted(TrainingJob.objects.filter(owner=alice).values_list("script_url", flat=True)) == [stored_script] * 2


@pytest.mark.parametrize("persona", ["carol", "bob"])  # the teammate and the outsider alike
def test_another_tenants_script_is_refused_on_the_field_and_audited(request, persona, alice, stored_script, object_store):
    other = request.getfixturevalue(persona)
    from .factories import api_client

    page, api = _refusals(other, logged_in(other), api_client(other), stored_script)
    assert page == api == [
        f"{stored_script} is not in your storage space (s3://{bucket_name(other.pk)}/). Upload the script there "
        "(Account › Storage) or correct the URL."
    ]
    refusals = AuditEvent.objects.filter(action=AuditAction.LOCATION_REFUSED, actor=other)
    assert refusals.count() == 2 and {e.target for e in refusals} == {stored_script}  # form and API
    assert {e.actor_name for e in refusals} == {persona}


def test_a_bucket_that_is_nobodys_is_refused_as_not_yours(alice, alice_client, alice_api, object_storage_settings):
    page, api = _refusals(alice, alice_client, alice_api, "s3://scripts/train.py")
    assert page == api == [not_yours_message("s3://scripts/train.py", alice.pk)]


def test_a_missing_object_in_ones_own_space_is_said_so(alice, alice_client, alice_api, stored_script):
    missing = f"s3://{bucket_name(alice.pk)}/uploads/not-uploaded.py"
    page, api = _refusals(alice, alice_client, alice_api, missing)
    assert page == api == [
        f"There is no object at {missing}: upload the training script first (Account › Storage, or "
        f"aws s3 cp train.py {missing} with your own keys), or correct the URL."
    ]


def test_storage_that_does_not_answer_is_said_so(alice, alice_client, alice_api, object_storage_settings):
    object_storage_settings.S3_ENDPOINT_URL = f"http://127.0.0.1:{free_port()}"
    url = f"s3://{bucket_name(alice.pk)}/uploads/train.py"
    page, api = _refusals(alice, alice_client, alice_api, url)
    assert page == api == [
        f"Object storage at {object_storage_settings.S3_ENDPOINT_URL} did not answer, so {url} could not be "
        "checked; try again in a moment."
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


def test_a_job_without_script_makes_its_owners_space(alice, alice_api, object_storage_settings, object_store):
    assert alice_api.post(JOBS, api_payload(), format="json").status_code == 201
    assert put_in_space(alice, object_store.endpoint, "uploads/x.py", b"x")  # her keys work: the space exists
