"""The registry password is stored encrypted and never shown back, anywhere."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from django.db import connection
from django.urls import reverse

from console.lib import crypto
from jobs.models import TrainingJob

from .factories import api_payload, form_post

PASSWORD = "hunter2-Registry!"


@pytest.fixture
def job(alice, alice_client):
    """A job created through the page with a registry user ID and password."""
    alice_client.post(reverse("jobs:create"), form_post(registry_username="robot", registry_password=PASSWORD))
    return TrainingJob.objects.get(owner=alice)


def raw_password_column(job_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT registry_password_encrypted FROM {TrainingJob._meta.db_table} WHERE id = %s", [job_id])
        return cursor.fetchone()[0]


def test_the_password_is_encrypted_at_rest(job):
    stored = raw_password_column(job.pk)
    assert stored and PASSWORD not in stored
    assert crypto.decrypt(stored) == PASSWORD
    assert job.registry_password() == PASSWORD


def test_the_same_password_encrypts_differently_each_time():
    assert crypto.encrypt(PASSWORD) != crypto.encrypt(PASSWORD)


def test_a_token_from_another_key_is_refused(settings):
    token = crypto.encrypt(PASSWORD)
    settings.SECRET_KEY = "another-secret-key-of-another-installation"
    with pytest.raises(ValueError, match="cannot be decrypted"):
        crypto.decrypt(token)


def test_an_explicit_fernet_key_is_used_when_set(settings):
    key = Fernet.generate_key().decode()
    settings.FIELD_ENCRYPTION_KEY = key
    token = crypto.encrypt(PASSWORD)
    assert Fernet(key.encode()).decrypt(token.encode()).decode() == PASSWORD


def test_no_password_stores_nothing(alice, alice_client):
    alice_client.post(reverse("jobs:create"), form_post())
    job = TrainingJob.objects.get(owner=alice)
    assert raw_password_column(job.pk) == "" and not job.has_registry_password


def test_the_detail_page_masks_the_password(alice_client, job):
    html = alice_client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
    assert PASSWORD not in html and raw_password_column(job.pk) not in html
    assert "••••••••" in html and "robot" in html


def test_the_list_page_does_not_show_the_password(alice_client, job):
    html = alice_client.get(reverse("jobs:list")).content.decode()
    assert job.name in html and PASSWORD not in html


def test_the_api_never_returns_the_password(alice_client, alice_api, job):
    for response in [
        alice_api.get("/api/v1/training-jobs/"),
        alice_api.get(f"/api/v1/training-jobs/{job.pk}/"),
        alice_api.patch(f"/api/v1/training-jobs/{job.pk}/", {"tags": []}, format="json"),
        alice_client.get(f"/api/v1/training-jobs/{job.pk}/"),
    ]:
        text = response.content.decode()
        assert response.status_code == 200
        assert PASSWORD not in text and raw_password_column(job.pk) not in text
        assert "registry_password_encrypted" not in text and '"registry_password"' not in text


def test_the_api_create_answer_does_not_echo_the_password(alice_api):
    response = alice_api.post(
        "/api/v1/training-jobs/", api_payload(registry_username="robot", registry_password=PASSWORD), format="json",
    )
    assert response.status_code == 201
    assert PASSWORD not in response.content.decode() and response.json()["has_registry_password"] is True


def test_the_admin_does_not_show_the_password(staff_client, job):
    pages = {  # what staff do see there: the job, and on its page the registry user ID
        reverse("admin:jobs_trainingjob_change", args=[job.pk]): 'name="registry_username" value="robot"',
        reverse("admin:jobs_trainingjob_changelist"): f">{job.name}</a>",
    }
    for url, shown in pages.items():
        response = staff_client.get(url)
        html = response.content.decode()
        assert response.status_code == 200 and shown in html, url
        assert PASSWORD not in html and raw_password_column(job.pk) not in html, url
        assert "registry_password_encrypted" not in html


def test_the_creation_page_does_not_render_the_password_back(alice_client):
    response = alice_client.post(reverse("jobs:create"), form_post(name="X", registry_username="robot", registry_password=PASSWORD))
    assert response.status_code == 200 and PASSWORD not in response.content.decode()
