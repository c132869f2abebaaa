"""Every page needs a login; the API answers 401/403 instead of redirecting."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.tests.factories import PASSWORD

PAGES = ["/", "/jobs/", "/jobs/create/", "/jobs/1/", "/jobs/1/?tab=tags", "/admin/"]


@pytest.mark.parametrize("url", PAGES)
def test_pages_send_an_anonymous_visitor_to_the_login_form(client, db, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response.url.startswith("/login/") or response.url.startswith("/admin/login/")


@pytest.mark.parametrize("url", ["/jobs/1/tags/", "/jobs/1/delete/", "/jobs/delete/"])
def test_posts_need_a_login_too(client, db, url):
    response = client.post(url, {"ids": ["1"]})
    assert response.status_code == 302 and response.url.startswith("/login/")


@pytest.mark.parametrize("url", ["/api/v1/training-jobs/", "/api/v1/server-types/", "/api/schema/"])
def test_the_api_answers_anonymous_calls_without_a_redirect(client, db, url):
    assert client.get(url).status_code in {401, 403}


def test_the_login_page_is_open(client, db):
    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert 'name="username"' in response.content.decode() and 'name="password"' in response.content.decode()


def test_a_user_logs_in_and_lands_where_they_were_going(client, alice):
    response = client.post(reverse("login"), {"username": "alice", "password": PASSWORD, "next": "/jobs/"})
    assert response.status_code == 302 and response.url == "/jobs/"
    assert client.get("/jobs/").status_code == 200


def test_a_wrong_password_is_refused_with_a_message(client, alice):
    response = client.post(reverse("login"), {"username": "alice", "password": "wrong"})
    assert response.status_code == 200
    assert "Your user name and password didn't match." in response.content.decode()
    assert client.get("/jobs/").status_code == 302


def test_logging_out_ends_the_session(alice_client):
    assert alice_client.get("/jobs/").status_code == 200
    response = alice_client.post(reverse("logout"))
    assert response.status_code == 302 and response.url == reverse("login")
    assert alice_client.get("/jobs/").status_code == 302


def test_the_header_offers_log_out_to_a_logged_in_user(alice_client):
    html = alice_client.get("/").content.decode()
    assert f'action="{reverse("logout")}"' in html and "alice" in html
