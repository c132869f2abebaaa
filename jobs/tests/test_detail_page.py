"""The job detail page: tabs, every field, status with history, tags in place, delete."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from jobs import actions
from jobs.choices import JobStatus
from jobs.models import TrainingJob

from .cases import tag_post, tag_rows
from .html import field_errors


def detail(job, tab: str = "") -> str:
    return reverse("jobs:detail", args=[job.pk]) + (f"?tab={tab}" if tab else "")


@pytest.fixture
def job(make_job):
    """A distributed spot job with every optional field set."""
    return make_job(
        name="bert-large", learning_type="spot", framework="deepspeed", framework_version="0.17.6",
        server_type="g3", gpus_per_node=4, memory_gb=2048, node_count=2, shm_size_gb=256,
        image_url="nvcr.io/nvidia/pytorch:24.05-py3", registry_username="robot",
        volume_mount_path="/mnt/data", script_url="s3://scripts/train.py", command="deepspeed train.py --zero 3",
        registry_password="s3cret-pass", tags=[{"key": "team", "value": "nlp"}],
    )


def dd(html: str, label: str) -> str:
    """The text shown next to a label of the details list."""
    match = re.search(rf"<dt>{re.escape(label)}</dt><dd>(.*?)</dd>", html, re.S)
    assert match, label
    return re.sub(r"<[^>]+>", "", match.group(1)).strip()


def test_it_has_the_four_tabs(alice_client, job):
    html = alice_client.get(detail(job)).content.decode()
    tabs = re.findall(r'<a href="\?tab=(\w+)" role="tab" data-tab="\w+" class="(active)?">(\w+)</a>', html)
    assert [(key, label) for key, _, label in tabs] == [
        ("details", "Details"), ("monitoring", "Monitoring"), ("logs", "Logs"), ("tags", "Tags"),
    ]
    assert [key for key, active, _ in tabs if active] == ["details"]


@pytest.mark.parametrize("tab", ["monitoring", "logs", "tags"])
def test_a_tab_can_be_opened_by_its_address(alice_client, job, tab):
    html = alice_client.get(detail(job, tab)).content.decode()
    assert f'data-tab="{tab}" class="active"' in html
    assert f'data-panel="{tab}"' in html and re.search(rf'data-panel="{tab}"[^>]*hidden', html) is None
    assert re.search(r'data-panel="details"[^>]*hidden', html)


def test_an_unknown_tab_shows_the_details(alice_client, job):
    html = alice_client.get(detail(job, "nope")).content.decode()
    assert 'data-tab="details" class="active"' in html


def test_the_details_show_every_field(alice_client, job):
    html = alice_client.get(detail(job)).content.decode()
    assert "<h1>bert-large</h1>" in html
    assert dd(html, "Learning type") == "Spot Training"
    assert dd(html, "Distributed framework") == "DeepSpeed 0.17.6"
    assert dd(html, "Job Failover") == "Not used"
    assert dd(html, "Server type") == "g3 (8× NVIDIA B300 SXM)"
    assert dd(html, "Resource allocation") == "4 GPU, 2048 GB per node"
    assert dd(html, "Number of nodes") == "2 (distributed)"
    assert dd(html, "Shared memory") == "256 GB"
    assert dd(html, "Estimated price") == "$20.48 per hour"  # 8 B300 at the spot price of 2.56
    assert dd(html, "AI Training Image URL") == "nvcr.io/nvidia/pytorch:24.05-py3"
    assert dd(html, "Registry user ID") == "robot"
    assert dd(html, "Registry password") == "••••••••"
    assert dd(html, "Volume mount path") == "/mnt/data"
    assert dd(html, "Training script") == "s3://scripts/train.py"
    assert dd(html, "Command") == "deepspeed train.py --zero 3"
    assert dd(html, "Created").startswith(job.created_at.strftime("%Y-%m-%d"))
    assert "s3cret-pass" not in html


def test_absent_optional_fields_show_a_dash(alice_client, make_job):
    job = make_job(failover_enabled=True)
    html = alice_client.get(detail(job)).content.decode()
    assert dd(html, "Registry password") == "—" and dd(html, "Registry user ID") == "—"
    assert dd(html, "Volume mount path") == "—" and dd(html, "Training script") == "—"
    assert dd(html, "Job Failover") == "Use" and dd(html, "Number of nodes") == "1 (single node)"


def test_it_shows_the_status_with_its_reason_and_history(alice_client, job):
    actions.transition(job.pk, JobStatus.CREATING, "Nodes assigned: node-a, node-b")
    actions.transition(job.pk, JobStatus.RUNNING, "All 2 processes started")
    html = alice_client.get(detail(job)).content.decode()
    assert 'id="job-status" data-status="Running">Running</span>' in html
    assert '<span class="muted" id="job-status-reason">All 2 processes started</span>' in html
    history = re.search(r'<table class="history" id="history">(.*?)</table>', html, re.S).group(1)
    rows = re.findall(r"<tr><td>[\d: -]+</td><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td></tr>", history)
    assert rows == [
        ("—", "Pending", "Created"),
        ("Pending", "Creating", "Nodes assigned: node-a, node-b"),
        ("Creating", "Running", "All 2 processes started"),
    ]


def test_tags_are_shown_in_the_tags_tab(alice_client, job):
    html = alice_client.get(detail(job, "tags")).content.decode()
    assert '<input name="tag_key" value="team"' in html and 'name="tag_value" value="nlp"' in html


def test_tags_are_added_changed_and_removed_in_place(alice_client, make_job):
    job = make_job(tags=[{"key": "team", "value": "nlp"}, {"key": "stale", "value": "yes"}])
    response = alice_client.post(
        reverse("jobs:tags", args=[job.pk]),
        tag_post([{"key": "team", "value": "vision"}, {"key": "owner", "value": "alice"}]),
    )
    assert response.status_code == 302 and response.url == detail(job, "tags")
    assert list(job.tags.values_list("key", "value")) == [("owner", "alice"), ("team", "vision")]
    assert "Tags saved." in alice_client.get(response.url).content.decode()


def test_all_tags_can_be_removed(alice_client, job):
    alice_client.post(reverse("jobs:tags", args=[job.pk]), {})
    assert job.tags.count() == 0
    assert 'id="no-tags"' in alice_client.get(detail(job, "tags")).content.decode()


@pytest.mark.parametrize(("rows", "message"), [
    (tag_rows(51), "Tags not saved: Add at most 50 tags."),
    ([{"key": "team", "value": "a"}, {"key": "team", "value": "b"}], "Tags not saved: Tag keys must be unique: 'team' appears twice."),
    ([{"key": "", "value": "orphan"}], "Tags not saved: A tag key must be 1 to 128 characters."),
])
def test_invalid_tags_are_refused_and_nothing_is_lost(alice_client, job, rows, message):
    response = alice_client.post(reverse("jobs:tags", args=[job.pk]), tag_post(rows))
    html = response.content.decode()
    assert response.status_code == 200
    assert field_errors(html) == {"tags": [message]}
    assert 'data-tab="tags" class="active"' in html
    # what was typed is still on the page, and the stored tags are untouched
    assert html.count('name="tag_key"') == len(rows) + 1  # + the empty row template
    assert list(job.tags.values_list("key", "value")) == [("team", "nlp")]


def test_deleting_a_pending_job_removes_it(alice_client, job):
    response = alice_client.post(reverse("jobs:delete", args=[job.pk]), follow=True)
    assert response.redirect_chain[-1][0] == reverse("jobs:list")
    assert "Training Job bert-large was deleted." in response.content.decode()
    assert not TrainingJob.objects.filter(pk=job.pk).exists()


def test_deleting_a_running_job_sets_it_terminating(alice_client, job):
    actions.transition(job.pk, JobStatus.CREATING, "Nodes assigned")
    actions.transition(job.pk, JobStatus.RUNNING, "Started")
    response = alice_client.post(reverse("jobs:delete", args=[job.pk]), follow=True)
    assert response.redirect_chain[-1][0] == detail(job)
    html = response.content.decode()
    assert "Training Job bert-large is terminating" in html
    assert 'id="job-status" data-status="Terminating">Terminating</span>' in html
    job.refresh_from_db()
    assert job.status == JobStatus.TERMINATING
    change = job.status_changes.last()
    assert (change.old_status, change.new_status, change.reason) == ("Running", "Terminating", "Deleted by the user")


def test_delete_asks_for_confirmation_first(alice_client, job):
    html = alice_client.get(detail(job)).content.decode()
    assert 'id="delete-job"' in html and '<dialog id="confirm-delete">' in html
    assert f'action="{reverse("jobs:delete", args=[job.pk])}"' in html


def test_delete_is_post_only(alice_client, job):
    assert alice_client.get(reverse("jobs:delete", args=[job.pk])).status_code == 405
    assert TrainingJob.objects.filter(pk=job.pk).exists()


def test_a_missing_job_is_a_404(alice_client, db):
    assert alice_client.get("/jobs/999999/").status_code == 404
