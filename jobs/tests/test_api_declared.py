"""The API declares what it accepts (the OpenAPI schema carries the form's rules) and refuses
what it does not declare: an empty or repeated `page`, an empty or repeated filter."""

from __future__ import annotations

import pytest

from console.lib.api_strict import StrictPageNumberPagination

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/training-jobs/"


@pytest.fixture
def spec(alice_client) -> dict:
    return alice_client.get("/api/schema/", {"format": "json"}).json()


def test_a_new_jobs_rules_are_in_the_schema(spec):
    body = spec["paths"][JOBS]["post"]["requestBody"]["content"]
    # JSON only: form bodies are not offered (a nullable integer or a list of tags does not survive them)
    assert list(body) == ["application/json"]
    assert body["application/json"]["schema"]["$ref"] == "#/components/schemas/TrainingJobRequest"
    job = spec["components"]["schemas"]["TrainingJobRequest"]["properties"]
    assert (job["name"]["minLength"], job["name"]["maxLength"], job["name"]["pattern"]) == (3, 63, r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$")
    assert (job["command"]["minLength"], job["command"]["maxLength"]) == (3, 1024)
    assert (job["keep_alive_minutes"]["minimum"], job["keep_alive_minutes"]["maximum"]) == (0, 60)
    assert job["framework_version"]["enum"] == ["0.18.9", "2.13.0", ""]
    assert (job["node_count"]["minimum"], job["node_count"]["maximum"]) == (1, 64)
    # what is read back is declared apart: a job may hold a version no longer offered
    assert "enum" not in spec["components"]["schemas"]["TrainingJob"]["properties"]["framework_version"]


def test_query_bounds_are_in_the_schema(spec):
    def parameters(path: str) -> dict:
        return {p["name"]: p["schema"] for p in spec["paths"][path]["get"]["parameters"]}

    assert parameters(JOBS)["page"]["minimum"] == 1
    assert parameters(JOBS)["search"]["minLength"] == 1 and parameters(JOBS)["name"]["minLength"] == 1
    logs = parameters("/api/v1/training-jobs/{id}/logs/")
    assert (logs["limit"]["minimum"], logs["limit"]["maximum"]) == (1, 5000)
    assert parameters("/api/v1/training-jobs/{id}/metrics/")["period"]["minimum"] == 1


@pytest.mark.parametrize(("query", "message"), [
    ("page=", "Enter a page number from 1 (not ''), or leave page out for the first page."),
    ("page=0", "Enter a page number from 1 (not '0'), or leave page out for the first page."),
    ("page=²", "Enter a page number from 1 (not '²'), or leave page out for the first page."),
    ("page=1&page=2", "Give page once (it was given 2 times)."),
])
def test_an_empty_or_repeated_page_is_refused_with_why(alice_api, query, message):
    response = alice_api.get(f"{JOBS}?{query}")
    assert response.status_code == 400
    assert response.json() == {"page": [message]}


def test_a_page_still_reads_as_before(alice_api, make_job):
    make_job(name="only-one")
    assert [job["name"] for job in alice_api.get(JOBS, {"page": "1"}).json()["results"]] == ["only-one"]
    assert alice_api.get(JOBS, {"page": "last"}).status_code == 200
    assert alice_api.get(JOBS, {"page": "2"}).status_code == 404  # past the end, as DRF answers it


def test_an_empty_or_repeated_filter_is_refused_with_why(alice_api, alice_client):
    empty = alice_api.get(f"{JOBS}?status=")
    assert empty.status_code == 400
    [message] = empty.json()["status"]
    assert message.startswith("status is empty: leave it out to not filter by it, or give a value (one of: Pending, Creating, Running")
    assert alice_api.get(f"{JOBS}?search=").json() == {"search": ["search is empty: leave it out to not filter by it, or give a value."]}
    twice = alice_api.get(f"{JOBS}?status=Running&status=Failed")
    assert twice.status_code == 400 and twice.json() == {"status": ["Give status once (it was given 2 times)."]}
    # the list page's own form sends `status=` for "every status": still a page
    assert alice_client.get("/jobs/?status=&q=").status_code == 200


def test_the_pagination_is_the_apis_default():
    from django.conf import settings

    assert settings.REST_FRAMEWORK["DEFAULT_PAGINATION_CLASS"] == f"{StrictPageNumberPagination.__module__}.StrictPageNumberPagination"
