"""The service home: the user's own jobs by status, recent ones, and the server types."""

from __future__ import annotations

from jobs import actions
from jobs.tests.factories import job_fields


def test_it_shows_the_users_jobs_by_status_and_recent_ones(alice, alice_client, bob):
    for name in ["one", "two"]:
        actions.create_job(alice, job_fields(name=name), [])
    actions.create_job(bob, job_fields(name="bobs-run"), [])
    html = alice_client.get("/").content.decode()
    assert "Training Jobs (2)" in html
    assert '<span class="status" data-status="Pending">Pending</span> 2' in html
    assert ">one</a>" in html and ">two</a>" in html and "bobs-run" not in html


def test_it_invites_a_new_user_to_create_a_job(alice_client):
    html = alice_client.get("/").content.decode()
    assert "No Training Jobs yet." in html and 'href="/jobs/create/"' in html


def test_it_lists_the_server_types(alice_client):
    html = alice_client.get("/").content.decode()
    assert "<b>g2</b> — 8× NVIDIA H100 SXM" in html and "<b>g3</b> — 8× NVIDIA B300 SXM" in html
