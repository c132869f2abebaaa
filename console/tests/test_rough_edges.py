"""The rough edges a first session hits: error pages in the console's layout with a way back,
a favicon, "staff only" instead of the admin login, the node page's XID default, the API
docs' description, and the admin's plural of "metric series"."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import Client, RequestFactory
from django.views.defaults import server_error

from jobs.tests.factories import UserFactory
from monitoring.models import MetricSeries

WAY_BACK = ['href="/">Service Home</a>', 'href="/jobs/">Training Jobs</a>', 'id="go-back"']


def test_a_missing_page_is_in_the_consoles_layout_with_a_way_back(alice_client):
    response = alice_client.get("/jobs/99999/")
    html = response.content.decode()
    assert response.status_code == 404
    assert 'class="topbar"' in html and "Page not found" in html and "<code>/jobs/99999/</code>" in html
    assert all(link in html for link in WAY_BACK)
    # the layout knows who is logged in, and the name leads to their account page
    assert '<a class="who" href="/account/" title="Your account: storage space and keys">alice</a>' in html


def test_a_non_staff_user_opening_nodes_is_told_it_is_for_staff(alice_client):
    for url in ("/nodes/", "/nodes/1/"):
        response = alice_client.get(url)
        html = response.content.decode()
        assert response.status_code == 403, url
        assert "<h1>Staff only</h1>" in html and "for the console's staff" in html
        assert all(link in html for link in WAY_BACK)
    assert alice_client.post("/nodes/1/cordon/", {"action": "cordon"}).status_code == 403


def test_staff_still_see_the_node_pages(db):
    staff = Client()
    staff.force_login(UserFactory(username="ops", is_staff=True))
    assert staff.get("/nodes/").status_code == 200


def test_a_server_error_page_renders_without_a_request_context(db):
    response = server_error(RequestFactory().get("/jobs/"))
    html = response.content.decode()
    assert response.status_code == 500
    assert "Something went wrong on our side" in html and 'class="topbar"' in html
    assert all(link in html for link in WAY_BACK)


@pytest.mark.parametrize("logged_in", [False, True])
def test_the_favicon_is_served_to_everyone(client, alice, logged_in):
    if logged_in:
        client.force_login(alice)
    response = client.get("/favicon.ico")
    body = b"".join(response.streaming_content)
    assert response.status_code == 200 and response["Content-Type"] == "image/x-icon"
    assert body[:4] == b"\x00\x00\x01\x00"  # an ICO file
    page = client.get("/login/").content.decode()
    assert 'rel="icon" href="/static/favicon.svg"' in page and 'rel="icon" href="/favicon.ico"' in page


def test_the_node_pages_xid_field_holds_a_real_default(db):
    from jobs.models import Node, ServerType

    node = Node.objects.create(name="gpu-01", server_type=ServerType.objects.get(name="g2"), address="127.0.0.1")
    staff = Client()
    staff.force_login(UserFactory(username="ops", is_staff=True))
    html = staff.get(f"/nodes/{node.pk}/").content.decode()
    assert '<input name="xid" type="number" min="1" value="79"' in html and 'placeholder="79"' not in html


def test_the_api_docs_describe_what_exists(alice_client):
    schema = alice_client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    description = schema["info"]["description"]
    assert "(later)" not in description
    assert all(word in description for word in ("logs", "metrics", "Workspaces", "cost"))


def test_the_admin_names_metric_series_in_the_plural_correctly():
    assert MetricSeries._meta.verbose_name_plural == "metric series"
    assert MetricSeries in admin.site._registry
