"""Another user's job does not exist for Bob: 404 in pages, API and WebSockets."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.models import TrainingJob

from .factories import api_payload


@pytest.fixture
def alices_job(make_job):
    """Alice's job, with a tag, that Bob tries to reach."""
    return make_job(name="alice-secret-run", tags=[{"key": "team", "value": "alice-team"}])


def test_bob_gets_404_for_alices_detail_page_and_every_tab(bob_client, alices_job):
    url = reverse("jobs:detail", args=[alices_job.pk])
    for tab in ["", "?tab=monitoring", "?tab=logs", "?tab=tags"]:
        assert bob_client.get(url + tab).status_code == 404


def test_bob_cannot_change_alices_tags(bob_client, alices_job):
    response = bob_client.post(reverse("jobs:tags", args=[alices_job.pk]), {"tag_key": ["x"], "tag_value": ["y"]})
    assert response.status_code == 404
    assert list(alices_job.tags.values_list("key", "value")) == [("team", "alice-team")]


def test_bob_cannot_delete_alices_job_from_a_page(bob_client, alices_job):
    assert bob_client.post(reverse("jobs:delete", args=[alices_job.pk])).status_code == 404
    assert TrainingJob.objects.filter(pk=alices_job.pk).exists()


def test_bulk_delete_ignores_alices_ids(bob, bob_client, alices_job, make_job):
    bobs = make_job(owner=bob, name="bob-run")
    response = bob_client.post(reverse("jobs:bulk_delete"), {"ids": [alices_job.pk, bobs.pk]}, follow=True)
    assert "Deleted 1 Training Job." in response.content.decode()
    assert TrainingJob.objects.filter(pk=alices_job.pk).exists()
    assert not TrainingJob.objects.filter(pk=bobs.pk).exists()


def test_bulk_delete_of_only_alices_ids_deletes_nothing(bob_client, alices_job):
    response = bob_client.post(reverse("jobs:bulk_delete"), {"ids": [alices_job.pk]}, follow=True)
    assert "Select at least one Training Job to delete." in response.content.decode()
    assert TrainingJob.objects.filter(pk=alices_job.pk).exists()


def test_bobs_pages_show_his_jobs_and_not_alices(bob, bob_client, alices_job, make_job):
    make_job(owner=bob, name="bob-own-run")
    pages = {
        reverse("jobs:list"): "bob-own-run",
        reverse("jobs:list") + "?q=alice": "No Training Jobs match these filters.",
        reverse("home"): "Training Jobs (1)",  # his count, not theirs together
    }
    for url, what_bob_sees in pages.items():
        response = bob_client.get(url)
        html = response.content.decode()
        assert response.status_code == 200 and what_bob_sees in html, url
        assert "alice-secret-run" not in html and "alice-team" not in html, url


def test_bob_gets_404_for_alices_job_in_the_api(bob_api, alices_job):
    url = f"/api/v1/training-jobs/{alices_job.pk}/"
    assert bob_api.get(url).status_code == 404
    assert bob_api.patch(url, {"tags": []}, format="json").status_code == 404
    assert bob_api.delete(url).status_code == 404
    assert TrainingJob.objects.filter(pk=alices_job.pk).exists()
    assert alices_job.tags.count() == 1


def test_bobs_api_list_does_not_show_alices_jobs(bob_api, alices_job):
    for params in [{}, {"search": "alice"}, {"status": "Pending"}]:
        body = bob_api.get("/api/v1/training-jobs/", params).json()
        assert body["count"] == 0 and body["results"] == []


def test_bob_may_reuse_alices_job_name(bob, bob_api, alices_job):
    response = bob_api.post("/api/v1/training-jobs/", api_payload(name="alice-secret-run"), format="json")
    assert response.status_code == 201
    assert TrainingJob.objects.filter(name="alice-secret-run").count() == 2
