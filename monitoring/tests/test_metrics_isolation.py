"""A user cannot read another user's metrics: not through the page, the API or a WebSocket."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from jobs.tests.factories import api_client, logged_in


@pytest.mark.django_db
def test_bob_gets_not_found_for_alices_metrics_in_the_api_and_the_page(alice, bob, make_job):
    job = make_job()
    url = f"/api/v1/training-jobs/{job.pk}/metrics/?metric=GPUUtilization"
    assert api_client(alice).get(url).status_code == 200
    assert api_client(bob).get(url).status_code == 404
    assert api_client(bob).get(url + "&format=csv").status_code == 404
    assert APIClient().get(url).status_code == 401
    assert logged_in(bob).get(f"/jobs/{job.pk}/?tab=monitoring").status_code == 404
