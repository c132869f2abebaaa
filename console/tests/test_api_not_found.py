"""A URL under /api/ that matches no route answers like the API (JSON), a page URL like a page."""

import pytest

pytestmark = pytest.mark.django_db


def test_an_unrouted_api_url_gets_a_json_404(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("alice", password="alice-pass-123"))
    response = client.get("/api/v1/nodes/1.5/")  # the router's id pattern refuses "1.5"
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Not found."}


def test_an_unknown_page_still_gets_the_404_page(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("alice", password="alice-pass-123"))
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
