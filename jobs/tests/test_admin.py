"""Staff manage everything in the Django admin: every model, with columns, filters and search."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin
from django.urls import reverse

from jobs import actions
from jobs.choices import JobStatus
from jobs.models import JobStatusChange

JOB_MODELS = sorted(apps.get_app_config("jobs").get_models(), key=lambda m: m.__name__)


@pytest.mark.parametrize("model", JOB_MODELS, ids=lambda m: m.__name__)
def test_every_model_of_jobs_is_registered_with_list_columns(model):
    assert admin.site.is_registered(model)
    model_admin = admin.site._registry[model]
    assert len(model_admin.list_display) > 1, "more than the default __str__ column"
    assert model_admin.search_fields


@pytest.mark.parametrize("model", JOB_MODELS, ids=lambda m: m.__name__)
def test_every_changelist_loads_for_staff(staff_client, make_job, model):
    make_job(tags=[{"key": "team", "value": "nlp"}])
    url = reverse(f"admin:jobs_{model._meta.model_name}_changelist")
    assert staff_client.get(url).status_code == 200
    assert staff_client.get(url, {"q": "nlp"}).status_code == 200


def test_the_job_changelist_searches_by_name_tag_and_owner(staff_client, alice, bob, make_job):
    make_job(name="llama", tags=[{"key": "team", "value": "nlp"}])
    make_job(name="resnet", owner=bob)
    url = reverse("admin:jobs_trainingjob_changelist")
    assert staff_client.get(url, {"q": "nlp"}).context["cl"].result_count == 1
    assert staff_client.get(url, {"q": "bob"}).context["cl"].result_count == 1
    html = staff_client.get(url).content.decode()
    assert "llama" in html and "resnet" in html  # staff see every user's jobs


def test_the_job_changelist_filters_by_status_and_learning_type(staff_client, make_job):
    make_job(name="waiting", learning_type="spot")
    creating = make_job(name="creating")
    actions.transition(creating.pk, JobStatus.CREATING, "Nodes assigned")
    url = reverse("admin:jobs_trainingjob_changelist")
    changelist = staff_client.get(url, {"status__exact": "Creating"}).context["cl"]
    assert [job.name for job in changelist.result_list] == ["creating"]
    changelist = staff_client.get(url, {"learning_type__exact": "spot"}).context["cl"]
    assert [job.name for job in changelist.result_list] == ["waiting"]


def test_the_job_change_page_shows_history_and_tags(staff_client, make_job):
    job = make_job(tags=[{"key": "team", "value": "nlp"}])
    html = staff_client.get(reverse("admin:jobs_trainingjob_change", args=[job.pk])).content.decode()
    assert "Waiting to be scheduled" in html and 'value="team"' in html and "Created" in html


def test_status_history_cannot_be_forged_in_the_admin(staff_client, make_job):
    job = make_job()
    change = job.status_changes.get()
    assert staff_client.get(reverse("admin:jobs_jobstatuschange_add")).status_code == 403
    staff_client.post(
        reverse("admin:jobs_jobstatuschange_change", args=[change.pk]),
        {"job": job.pk, "old_status": "Running", "new_status": "Completed", "reason": "forged"},
    )
    change.refresh_from_db()
    assert (change.new_status, change.reason) == ("Pending", "Created")
    assert JobStatusChange.objects.count() == 1


def test_a_user_who_is_not_staff_is_sent_to_log_in(alice_client):
    response = alice_client.get(reverse("admin:jobs_trainingjob_changelist"))
    assert response.status_code == 302 and "/login/" in response.url
