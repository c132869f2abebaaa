"""Training environments: the pinned lists' rules, what the form and the API offer, what a
placement carries to the node agent, and the admin where staff manage them."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from jobs import actions, lifecycle
from jobs.environments import offered
from jobs.environments.requirements import parse_requirements, pinned_version, summary
from jobs.models import TrainingEnvironment
from jobs.nodes import desired
from jobs.scheduling.decision import Assignment

from .factories import api_payload, form_post, job_fields
from .test_nodes import make_node

# -- the pinned list (plain functions) -------------------------------------------------------------


def test_a_list_of_exact_pins_with_torch_is_accepted():
    pins, errors = parse_requirements("# the seed's set\ntorch==2.13.0\n\ntransformers == 5.10.2  # trainer\naccelerate[deepspeed]==1.13.0\n")
    assert errors == []
    assert pins == ["torch==2.13.0", "transformers==5.10.2", "accelerate[deepspeed]==1.13.0"]
    assert pinned_version(pins, "Accelerate") == "1.13.0" and pinned_version(pins, "numpy") is None
    assert summary(pins) == "torch 2.13.0, transformers 5.10.2, accelerate[deepspeed] 1.13.0"


@pytest.mark.parametrize(("text", "message"), [
    ("torch==2.13.0\nnumpy>=2", "line 2: 'numpy>=2' is not an exact pin like numpy==2.4.6 (no ranges, URLs or pip options)"),
    ("torch==2.13.0\n--index-url http://x", "line 2: '--index-url http://x' is not an exact pin"),
    ("torch==2.13.0\ngit+https://example.com/x.git", "line 2: 'git+https://example.com/x.git' is not an exact pin"),
    ("torch==2.13.0\nTorch==2.12.1", "line 2: Torch is pinned twice"),
    ("numpy==2.4.6", "pin torch (e.g. torch==2.13.0): every training environment is built on it"),
    ("", "pin torch (e.g. torch==2.13.0): every training environment is built on it"),
])
def test_it_refuses_lists_that_are_not_exact_pins_of_a_torch_environment(text, message):
    _, errors = parse_requirements(text)
    assert errors and errors[0].startswith(message)


# -- the seeded environments, the form and the API -------------------------------------------------


@pytest.mark.django_db
def test_the_seeded_environments_hold_the_seed_s_set_on_the_local_torch():
    pytorch = TrainingEnvironment.objects.get(name="pytorch-2.13.0")
    deepspeed = TrainingEnvironment.objects.get(name="deepspeed-0.18.9")
    seed_set = ["torch==2.13.0", "transformers==5.10.2", "datasets==4.8.4", "safetensors==0.8.0", "accelerate==1.13.0", "numpy==2.4.6"]
    assert all(pin in pytorch.pins() for pin in seed_set) and "deepspeed" not in pytorch.requirements
    assert deepspeed.pins()[-1] == "deepspeed==0.18.9" and all(pin in deepspeed.pins() for pin in seed_set)
    assert offered.offered_versions() == {"pytorch": ["2.13.0"], "deepspeed": ["0.18.9"]}


@pytest.mark.django_db
def test_the_form_offers_what_exists_and_says_what_each_holds(alice_client):
    TrainingEnvironment.objects.create(name="deepspeed-0.19.0", framework="deepspeed", version="0.19.0",
                                       requirements="torch==2.13.0\ndeepspeed==0.19.0\n", image="registry.example.com/ds:0.19")
    TrainingEnvironment.objects.create(name="old", framework="deepspeed", version="0.16.0", requirements="torch==2.13.0", enabled=False)
    html = alice_client.get("/jobs/create/").content.decode()
    assert '<option value="0.19.0">DeepSpeed 0.19.0 — torch 2.13.0, deepspeed 0.19.0</option>' in html
    assert "DeepSpeed 0.18.9 — torch 2.13.0, transformers 5.10.2, datasets 4.8.4" in html
    assert "0.16.0" not in html  # disabled: not offered
    assert "registry.example.com/ds:0.19" in html  # the image that provides it under the Docker runtime


@pytest.mark.django_db
def test_a_version_without_an_environment_is_refused_alike_in_the_form_and_the_api(alice_client, alice_api):
    TrainingEnvironment.objects.filter(name="deepspeed-0.18.9").update(enabled=False)
    response = alice_client.post("/jobs/create/", form_post(framework="deepspeed", framework_version="0.18.9"))
    assert "No version of DeepSpeed is offered at the moment." in response.content.decode()
    api = alice_api.post("/api/v1/training-jobs/", api_payload(framework="pytorch", framework_version="2.12.1"), format="json")
    assert api.status_code == 400
    assert api.json() == {"framework_version": ["Choose a version of the framework: 2.13.0."]}


@pytest.mark.django_db
def test_the_api_defaults_to_the_newest_offered_version(alice_api):
    TrainingEnvironment.objects.create(name="pytorch-2.14.0", framework="pytorch", version="2.14.0", requirements="torch==2.14.0")
    response = alice_api.post("/api/v1/training-jobs/", api_payload(framework="pytorch", framework_version=""), format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["framework_version"] == "2.14.0"


# -- what the node agent receives ------------------------------------------------------------------


@pytest.mark.django_db
def test_a_placement_carries_its_job_s_training_environment(alice):
    node = make_node("gpu-01")
    job = actions.create_job(alice, job_fields(framework="deepspeed", framework_version="0.18.9"), [])
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])
    [placement] = desired.desired_placements(node.pk)
    environment = placement["environment"]
    assert environment["name"] == "deepspeed-0.18.9" and environment["framework_label"] == "DeepSpeed"
    assert "deepspeed==0.18.9" in environment["requirements"] and "torch==2.13.0" in environment["requirements"]


@pytest.mark.django_db
def test_a_job_whose_environment_is_gone_runs_without_one(alice):
    node = make_node("gpu-01")
    job = actions.create_job(alice, job_fields(framework="deepspeed", framework_version="0.17.6"), [])  # created before it was removed
    lifecycle.start_attempt(job.pk, [Assignment(node.pk, node.name, (0,))])
    [placement] = desired.desired_placements(node.pk)
    assert "environment" not in placement


# -- the admin ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_staff_add_an_environment_in_the_admin_and_a_bad_list_is_refused(staff_client):
    url = "/admin/jobs/trainingenvironment/add/"
    bad = staff_client.post(url, {"name": "ds-next", "framework": "deepspeed", "version": "0.19.0",
                                  "requirements": "deepspeed>=0.19", "enabled": "on"})
    assert bad.status_code == 200 and "is not an exact pin" in bad.content.decode()
    assert not TrainingEnvironment.objects.filter(name="ds-next").exists()
    good = staff_client.post(url, {"name": "ds-next", "framework": "deepspeed", "version": "0.19.0",
                                   "requirements": "torch==2.13.0\ndeepspeed==0.19.0", "image": "", "enabled": "on"})
    assert good.status_code == 302
    listing = staff_client.get("/admin/jobs/trainingenvironment/").content.decode()
    assert "ds-next" in listing and "torch 2.13.0, deepspeed 0.19.0" in listing


def test_models_clean_refuses_a_list_without_torch():
    with pytest.raises(ValidationError) as raised:
        TrainingEnvironment(name="x", framework="pytorch", version="1", requirements="numpy==2.4.6").clean()
    assert "pin torch" in str(raised.value)
