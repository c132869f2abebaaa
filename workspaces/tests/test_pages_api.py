"""Workspace pages and API: create, edit, cancel, same messages, and owner/outsider isolation."""

from __future__ import annotations

import html

import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.test import APIClient

from workspaces.models import Workspace

from .factories import create_job, make_workspace, place, workspace_fields

pytestmark = pytest.mark.django_db


@pytest.fixture
def alices(alice, nodes) -> Workspace:
    """Alice's Deployed workspace on gpu-01 and gpu-02."""
    return make_workspace(alice, node_count=2)


def form(**overrides) -> dict:
    return {key: str(value) for key, value in workspace_fields(**overrides).items() if key != "memory_gb"}


def test_the_create_page_shows_allocations_contracts_and_free_nodes(alice_client, nodes):
    page = alice_client.get("/workspaces/create/")
    assert page.status_code == 200
    assert page.context["free_nodes"] == {"g2": 4}
    assert page.context["pricing"]["terms"] == {"1": "10.00", "3": "20.00", "6": "30.00", "12": "40.00"}
    text = page.content.decode()
    assert 'id="confirm-create"' in text and "Estimated billing amount" in text


def test_creating_through_the_form_reserves_nodes(alice, alice_client, nodes):
    response = alice_client.post("/workspaces/create/", form(name="vision.team-1"))
    assert response.status_code == 302 and response["Location"] == reverse("workspaces:list")
    ws = Workspace.objects.get(owner=alice)
    assert (ws.name, ws.status, ws.memory_gb, ws.contract_months) == ("vision.team-1", "Deployed", 2048, 3)


CASES = {
    "name-blank": ({"name": ""}, "name", "Enter 1 to 63 characters."),
    "name-long": ({"name": "a" * 64}, "name", "Enter 1 to 63 characters."),
    "name-chars": ({"name": "Team_WS"}, "name", "Use only lowercase letters, digits, '-' and '.'."),
    "name-edges": ({"name": "ws-"}, "name", "The name must start and end with a lowercase letter or digit."),
    "server-type": ({"server_type": "g9"}, "server_type", "Select a server type from the catalogue."),
    "allocation": ({"gpus_per_node": 3}, "gpus_per_node", "Server type g2 offers 1, 2, 4, 8 GPUs per node."),
    "nodes-zero": ({"node_count": 0}, "node_count", "Enter 1 to 64 nodes (distributed training from 2)."),
    "nodes-many": ({"node_count": 65}, "node_count", "Enter 1 to 64 nodes (distributed training from 2)."),
    "contract": ({"contract_months": 2}, "contract_months", "Choose a contract period: 1, 3, 6 or 12 months."),
}


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_form_and_the_api_refuse_with_the_same_message(alice_client, alice_api, case):
    overrides, field, message = CASES[case]
    page = alice_client.post("/workspaces/create/", form(**overrides))
    assert html.escape(message) in page.content.decode()
    payload = {**workspace_fields(), **overrides}
    payload.pop("memory_gb")
    assert alice_api.post("/api/v1/workspaces/", payload, format="json").json()[field] == [message]
    assert not Workspace.objects.exists()


def test_a_duplicate_name_is_refused(alice, alice_client, alice_api, alices):
    message = "You already have a Training Workspace with this name."
    assert html.escape(message) in alice_client.post("/workspaces/create/", form()).content.decode()
    assert alice_api.post("/api/v1/workspaces/", workspace_fields(), format="json").json()["name"] == [message]


def test_the_api_creates_reads_resizes_and_cancels(alice_api, nodes):
    created = alice_api.post("/api/v1/workspaces/", {**workspace_fields(), "memory_gb": None}, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["status"] == "Deployed" and body["reserved_nodes"] == ["gpu-01", "gpu-02"]
    assert body["estimate"] == {"hourly": "39.68", "monthly": "28966.40", "contract_total": "86899.20"}
    url = f"/api/v1/workspaces/{body['id']}/"
    grown = alice_api.patch(url, {"node_count": 3}, format="json").json()
    assert grown["node_count"] == 3 and len(grown["reserved_nodes"]) == 3
    refused = alice_api.patch(url, {"contract_months": 12}, format="json")
    assert refused.json() == {"contract_months": ["Only the number of nodes can be changed after a Training Workspace is created."]}
    assert alice_api.delete(url).status_code == 204
    assert alice_api.get(url).status_code == 404


def test_a_refused_shrink_gives_the_same_message_on_the_page_and_in_the_api(alice, alice_client, alice_api, alices, nodes):
    for name, node in (("one", nodes[0]), ("two", nodes[1])):
        place(create_job(alice, name=name, workspace=alices), node)
    page = alice_client.post(f"/workspaces/{alices.pk}/edit/", {"node_count": "1", "when_busy": "refuse"})
    message = page.context["form"].non_field_errors()[0]
    assert message.startswith("Cannot shrink to 1 node(s) now: only 0 of the 2 nodes are idle (gpu-01 runs one; gpu-02 runs two).")
    api = alice_api.patch(f"/api/v1/workspaces/{alices.pk}/", {"node_count": 1}, format="json")
    assert api.status_code == 400 and api.json()["non_field_errors"] == [message]
    drained = alice_client.post(f"/workspaces/{alices.pk}/edit/", {"node_count": "1", "when_busy": "drain"})
    assert drained.status_code == 302
    alices.refresh_from_db()
    assert alices.status == "Updating" and alices.status_reason.startswith("Draining gpu-01")


def test_jobs_are_created_in_a_workspace_through_the_form_and_the_api(alice, alice_client, alice_api, alices):
    from jobs.tests.factories import api_payload, form_post

    assert alice_client.post("/jobs/create/", form_post(name="in-form", workspace="team-ws")).status_code == 302
    created = alice_api.post("/api/v1/training-jobs/", api_payload(name="in-api", workspace="team-ws"), format="json")
    assert created.status_code == 201 and created.json()["workspace"] == "team-ws"
    assert set(alices.jobs.values_list("name", flat=True)) == {"in-form", "in-api"}
    message = "Spot Training cannot run in a Training Workspace: its nodes are reserved for you."
    spot = alice_api.post("/api/v1/training-jobs/", api_payload(name="spot", workspace="team-ws", learning_type="spot"), format="json")
    assert spot.json()["learning_type"] == [message]
    page = alice_client.post("/jobs/create/", form_post(name="spot", workspace="team-ws", learning_type="spot"))
    assert html.escape(message) in page.content.decode()
    too_many = alice_api.post("/api/v1/training-jobs/", api_payload(name="wide", workspace="team-ws", node_count=3), format="json")
    assert too_many.json()["node_count"] == ["Training Workspace team-ws has 2 node(s); a job in it can use at most 2."]


def test_cancelling_from_the_list_in_bulk_and_from_the_detail_page(alice, alice_client, nodes):
    first, second = make_workspace(alice, name="first", node_count=1), make_workspace(alice, name="second", node_count=1)
    third = make_workspace(alice, name="third", node_count=1)
    response = alice_client.post("/workspaces/cancel/", {"ids": [first.pk, second.pk]}, follow=True)
    assert "Service cancelled for 2 Training Workspace(s): first, second." in response.content.decode()
    assert alice_client.post(f"/workspaces/{third.pk}/cancel/").status_code == 302
    assert not Workspace.objects.exists()


# --- isolation: Bob never sees or touches Alice's workspaces -----------------------------------

def test_the_list_shows_only_the_users_own_workspaces(alice, bob, bob_client, alices):
    make_workspace(bob, name="bobs", node_count=1)
    page = bob_client.get("/workspaces/").content.decode()
    assert "bobs" in page and "team-ws" not in page


@pytest.mark.parametrize("path", ["/workspaces/{pk}/", "/workspaces/{pk}/edit/"])
def test_another_users_workspace_pages_do_not_exist(bob_client, alices, path):
    assert bob_client.get(path.format(pk=alices.pk)).status_code == 404
    assert bob_client.post(path.format(pk=alices.pk), {"node_count": "1"}).status_code == 404


def test_another_user_cannot_cancel_or_resize_a_workspace(bob_client, bob_api, alices):
    assert bob_client.post(f"/workspaces/{alices.pk}/cancel/").status_code == 404
    bob_client.post("/workspaces/cancel/", {"ids": [alices.pk]})
    url = f"/api/v1/workspaces/{alices.pk}/"
    assert bob_api.get(url).status_code == 404
    assert bob_api.patch(url, {"node_count": 1}, format="json").status_code == 404
    assert bob_api.delete(url).status_code == 404
    assert bob_api.get("/api/v1/workspaces/").json()["results"] == []
    alices.refresh_from_db()
    assert alices.status == "Deployed" and alices.node_count == 2


def test_another_user_cannot_create_a_job_in_a_workspace(bob_client, bob_api, alices):
    from jobs.tests.factories import api_payload, form_post

    message = "Select one of your Training Workspaces, or none to use the shared pool."
    assert bob_api.post("/api/v1/training-jobs/", api_payload(workspace="team-ws"), format="json").json()["workspace"] == [message]
    assert html.escape(message) in bob_client.post("/jobs/create/", form_post(workspace="team-ws")).content.decode()
    assert not alices.jobs.exists()


def test_usage_and_quotas_show_only_the_users_own_numbers(alice, bob_client, alices):
    create_job(alice, name="alices-job")
    usage = bob_client.get("/usage/")
    assert usage.context["months"] == []
    assert "team-ws" not in usage.content.decode() and "alices-job" not in usage.content.decode()
    assert bob_client.get("/quotas/").status_code == 200


def test_the_job_page_of_another_user_stays_hidden(alice, bob_client):
    job = create_job(alice)
    assert bob_client.get(f"/jobs/{job.pk}/").status_code == 404


@pytest.mark.parametrize("path", ["/workspaces/", "/workspaces/create/", "/usage/", "/quotas/"])
def test_pages_need_a_login(client, path):
    response = client.get(path)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_the_api_needs_a_token(db):
    response = APIClient().get("/api/v1/workspaces/")
    assert response.status_code == 401


def test_the_list_page_and_api_make_a_fixed_number_of_queries(alice, alice_client, alice_api, db):
    def count(path: str, client) -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get(path).status_code == 200
        return len(queries)

    make_workspace(alice, name="one", node_count=1)
    few = count("/workspaces/", alice_client), count("/api/v1/workspaces/", alice_api)
    for i in range(5):
        make_workspace(alice, name=f"more-{i}", node_count=1)
    assert (count("/workspaces/", alice_client), count("/api/v1/workspaces/", alice_api)) == few


@pytest.mark.parametrize("model", sorted(apps.get_app_config("workspaces").get_models(), key=lambda m: m.__name__), ids=lambda m: m.__name__)
def test_every_model_has_a_working_admin_changelist(staff_client, alices, model):
    url = reverse(f"admin:workspaces_{model._meta.model_name}_changelist")
    assert staff_client.get(url).status_code == 200
    assert staff_client.get(url, {"q": "alice"}).status_code == 200


def test_staff_set_a_quota_in_the_admin(staff_client, alice):
    from jobs.models import ServerType
    from workspaces.models import Quota

    g3 = ServerType.objects.get(name="g3")
    response = staff_client.post(reverse("admin:workspaces_quota_add"), {
        "user": alice.pk, "max_gpus_in_use": "16", "max_concurrent_jobs": "4", "max_nodes_per_job": "2",
        "allowed_server_types": [g3.pk], "spot_allowed": "on", "monthly_gpu_hour_budget": "500",
    })
    assert response.status_code == 302, response.content.decode()[:2000]
    quota = Quota.objects.get(user=alice)
    assert quota.limits().allowed_server_types == {"g3"} and not quota.workspaces_allowed
