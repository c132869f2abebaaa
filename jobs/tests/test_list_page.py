"""The Training Jobs list: columns, filters, search, pagination, bulk delete, no N+1 queries."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from jobs import actions
from jobs.choices import JobStatus
from jobs.models import TrainingJob

URL = reverse("jobs:list")


def names(html: str) -> list[str]:
    """Job names in the table, in order."""
    return re.findall(r'<td><a href="/jobs/\d+/">([^<]+)</a></td>', html)


def test_it_shows_the_columns_of_a_job(alice_client, make_job):
    job = make_job(
        name="bert-large", learning_type="spot", server_type="g3", gpus_per_node=4, memory_gb=2048,
        node_count=2, tags=[{"key": "team", "value": "nlp"}, {"key": "draft", "value": ""}],
    )
    html = alice_client.get(URL).content.decode()
    for header in ["Name", "Status", "Type", "Server type", "Nodes × GPUs", "Created", "Tags"]:
        assert f"<th>{header}</th>" in html
    row = re.search(rf'<tr data-job-id="{job.pk}">(.*?)</tr>', html, re.S).group(1)
    assert 'data-status="Pending">Pending</span>' in row
    assert "<td>Spot Training</td>" in row and "<td>g3</td>" in row and "<td>2 × 4</td>" in row
    assert f'datetime="{job.created_at.isoformat()}"' in row
    assert '<span class="tag">draft</span><span class="tag">team=nlp</span>' in row


def test_it_lists_newest_first(alice_client, make_job):
    for name in ["one", "two", "three"]:
        make_job(name=name)
    assert names(alice_client.get(URL).content.decode()) == ["three", "two", "one"]


def test_it_says_when_there_are_no_jobs(alice_client):
    assert "No Training Jobs." in alice_client.get(URL).content.decode()


def test_it_filters_by_status(alice_client, make_job):
    make_job(name="waiting")
    creating = make_job(name="creating")
    actions.transition(creating.pk, JobStatus.CREATING, "Nodes assigned")
    assert names(alice_client.get(URL, {"status": "Creating"}).content.decode()) == ["creating"]
    assert names(alice_client.get(URL, {"status": "Pending"}).content.decode()) == ["waiting"]
    html = alice_client.get(URL, {"status": "Completed"}).content.decode()
    assert names(html) == [] and "No Training Jobs match these filters." in html
    assert '<option value="Creating" selected>' in alice_client.get(URL, {"status": "Creating"}).content.decode()


def test_it_filters_by_learning_type(alice_client, make_job):
    make_job(name="cheap", learning_type="spot")
    make_job(name="reserved")
    assert names(alice_client.get(URL, {"learning_type": "spot"}).content.decode()) == ["cheap"]
    assert names(alice_client.get(URL, {"learning_type": "on_demand"}).content.decode()) == ["reserved"]


def test_it_searches_by_name_and_by_tag(alice_client, make_job):
    make_job(name="llama-70b", tags=[{"key": "team", "value": "nlp"}])
    make_job(name="resnet", tags=[{"key": "project", "value": "vision"}, {"key": "team", "value": "cv"}])
    assert names(alice_client.get(URL, {"q": "llama"}).content.decode()) == ["llama-70b"]
    assert names(alice_client.get(URL, {"q": "vision"}).content.decode()) == ["resnet"]
    assert names(alice_client.get(URL, {"q": "project"}).content.decode()) == ["resnet"]
    # a job matching through two tags is listed once
    assert names(alice_client.get(URL, {"q": "team"}).content.decode()) == ["resnet", "llama-70b"]
    assert 'value="vision"' in alice_client.get(URL, {"q": "vision"}).content.decode()


def test_filters_combine(alice_client, make_job):
    make_job(name="spot-nlp", learning_type="spot", tags=[{"key": "team", "value": "nlp"}])
    make_job(name="od-nlp", tags=[{"key": "team", "value": "nlp"}])
    make_job(name="spot-cv", learning_type="spot")
    html = alice_client.get(URL, {"q": "nlp", "learning_type": "spot", "status": "Pending"}).content.decode()
    assert names(html) == ["spot-nlp"]


def test_a_wrong_filter_value_is_named_above_an_empty_list(alice_client, make_job):
    make_job(name="llama-70b")
    response = alice_client.get(URL, {"status": "Finished", "learning_type": "spot"})
    assert response.status_code == 200
    html = response.content.decode()
    errors = re.search(r'<div class="error-box" role="alert">(.*?)</div>', html, re.S).group(1)
    assert "Finished is not a status; choose one of: Pending, Creating, Running," in errors
    assert names(html) == []
    # the rows the live list fetches with the same query are empty too, not a 500
    assert names(alice_client.get(reverse("jobs:list_rows"), {"status": "Finished"}).content.decode()) == []


def test_it_paginates_and_keeps_the_filters(settings, alice_client, make_job):
    settings.JOBS_PAGE_SIZE = 2
    for i in range(5):
        make_job(name=f"run-{i}", learning_type="spot")
    first = alice_client.get(URL, {"learning_type": "spot"}).content.decode()
    assert names(first) == ["run-4", "run-3"] and "Page 1 of 3" in first
    assert 'href="?page=2&q=&status=&learning_type=spot">Next ›</a>' in first
    assert names(alice_client.get(URL, {"learning_type": "spot", "page": 3}).content.decode()) == ["run-0"]
    # a page past the end shows the last one
    assert names(alice_client.get(URL, {"page": 99}).content.decode()) == ["run-0"]


def test_bulk_delete_removes_the_selected_jobs(alice_client, make_job):
    keep, gone_a, gone_b = make_job(name="keep"), make_job(name="gone-a"), make_job(name="gone-b")
    response = alice_client.post(reverse("jobs:bulk_delete"), {"ids": [gone_a.pk, gone_b.pk]}, follow=True)
    assert "Deleted 2 Training Jobs." in response.content.decode()
    assert list(TrainingJob.objects.values_list("name", flat=True)) == [keep.name]


def test_bulk_delete_sets_running_jobs_terminating(alice_client, make_job):
    pending, running = make_job(name="pending"), make_job(name="running")
    actions.transition(running.pk, JobStatus.CREATING, "Nodes assigned")
    actions.transition(running.pk, JobStatus.RUNNING, "Started")
    response = alice_client.post(reverse("jobs:bulk_delete"), {"ids": [pending.pk, running.pk]}, follow=True)
    assert ("Deleted 1 Training Job. 1 more is terminating: its processes are being stopped on its nodes, then it is "
            "deleted.") in response.content.decode()
    running.refresh_from_db()
    assert running.status == JobStatus.TERMINATING
    assert not TrainingJob.objects.filter(pk=pending.pk).exists()


def test_bulk_delete_of_only_running_jobs_says_they_are_being_stopped(alice_client, make_job):
    for name in ("a", "b"):
        job = make_job(name=f"running-{name}")
        actions.transition(job.pk, JobStatus.CREATING, "Nodes assigned")
    response = alice_client.post(reverse("jobs:bulk_delete"), {"ids": list(TrainingJob.objects.values_list("pk", flat=True))}, follow=True)
    html = response.content.decode()
    assert "2 Training Jobs are terminating: their processes are being stopped on their nodes, then they are deleted." in html
    assert "0 Training Job" not in html and "Deleted 0" not in html


def test_bulk_delete_without_a_selection_says_so(alice_client, make_job):
    make_job()
    response = alice_client.post(reverse("jobs:bulk_delete"), {"ids": ["", "abc"]}, follow=True)
    assert "Select at least one Training Job to delete." in response.content.decode()
    assert TrainingJob.objects.count() == 1


def test_bulk_delete_is_post_only(alice_client, make_job):
    job = make_job()
    assert alice_client.get(reverse("jobs:bulk_delete"), {"ids": [job.pk]}).status_code == 405
    assert TrainingJob.objects.filter(pk=job.pk).exists()


def test_the_page_has_the_selection_and_confirm_dialog(alice_client, make_job):
    job = make_job()
    html = alice_client.get(URL).content.decode()
    assert f'name="ids" value="{job.pk}"' in html
    assert 'id="delete-selected"' in html and '<dialog id="confirm-delete">' in html


@pytest.mark.parametrize("count", [3, 30])
def test_the_list_makes_the_same_queries_for_3_and_30_jobs(alice_client, make_job, django_assert_num_queries, count):
    for i in range(count):
        make_job(name=f"run-{i}", tags=[{"key": "team", "value": "nlp"}, {"key": "n", "value": str(i)}])
    alice_client.get(URL)  # the session and user are loaded the same way each time
    # session, user, count, page of jobs, their tags
    with django_assert_num_queries(5):
        response = alice_client.get(URL, {"q": "team"})
    assert len(names(response.content.decode())) == min(count, 20)
