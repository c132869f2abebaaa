"""POST /api/v1/training-jobs/validate/: a new job checked as a create would, nothing saved.

The `simpleai` command calls it before it uploads anything, so a job file is refused with the
same messages as the form and the API's create.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.models import TrainingJob

from .cases import CASE_PARAMS
from .factories import OMIT, api_payload, form_post
from .html import field_errors

VALIDATE = "/api/v1/training-jobs/validate/"


def test_a_valid_job_is_answered_with_its_defaults_filled_in_and_not_saved(alice, alice_api):
    payload = api_payload(name="checked", framework_version=OMIT, memory_gb=OMIT, tags=[{"key": "team", "value": "nlp"}])

    response = alice_api.post(VALIDATE, payload, format="json")

    assert response.status_code == 200, response.json()
    draft = response.json()
    assert (draft["name"], draft["framework_version"], draft["memory_gb"]) == ("checked", "2.13.0", 256)
    assert draft["tags"] == [{"key": "team", "value": "nlp"}]
    assert draft["workspace"] == "" and "registry_password" not in draft
    assert not TrainingJob.objects.filter(owner=alice).exists()


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_every_message_is_the_forms_and_the_creates(alice, alice_client, alice_api, case):
    validate = alice_api.post(VALIDATE, api_payload(**case.api), format="json")
    create = alice_api.post("/api/v1/training-jobs/", api_payload(**case.api), format="json")
    page = alice_client.post(reverse("jobs:create"), form_post(**case.form))

    assert validate.status_code == 400
    assert validate.json() == create.json() == {case.field: [case.message]}
    assert field_errors(page.content) == {case.field: [case.message]}
    assert not TrainingJob.objects.filter(owner=alice).exists()


def test_a_name_the_owner_used_is_refused_but_another_users_is_not(alice_api, bob_api, make_job):
    make_job(name="llama-finetune")
    taken = alice_api.post(VALIDATE, api_payload(name="llama-finetune"), format="json")
    assert taken.status_code == 400
    assert taken.json() == {"name": ["You already have a Training Job with this name."]}
    assert bob_api.post(VALIDATE, api_payload(name="llama-finetune"), format="json").status_code == 200


def test_anonymous_is_refused(client, db):
    assert client.post(VALIDATE, api_payload(), content_type="application/json").status_code in {401, 403}


def test_the_schema_declares_validate_with_its_answers(alice_client):
    spec = alice_client.get("/api/schema/", {"format": "json"}).json()
    validate = spec["paths"]["/api/v1/training-jobs/validate/"]["post"]
    assert {"200", "400", "401", "403"} <= set(validate["responses"])
    assert validate["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/TrainingJobRequest")
