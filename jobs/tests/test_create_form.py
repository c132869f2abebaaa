"""Creating a Training Job through the real page: every rule, its message next to its field."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.choices import JobStatus
from jobs.models import TrainingJob

from .cases import CASE_PARAMS, tag_post, tag_rows
from .factories import form_post
from .html import field_errors

URL = reverse("jobs:create")


def test_the_page_shows_every_area_and_field(alice_client):
    html = alice_client.get(URL).content.decode()
    for area in ["Required information", "Service information", "AI Training Image", "Training command and volume", "Additional information"]:
        assert f"<legend>{area}</legend>" in html
    for field in [
        "learning_type", "name", "framework", "framework_version", "failover_enabled", "server_type",
        "gpus_per_node", "node_count", "shm_size_gb", "image_url", "registry_username", "registry_password",
        "use_storage", "volume_mount_path", "script_url", "command",
    ]:
        assert f'name="{field}"' in html, field
    assert 'id="add-tag"' in html and 'id="summary"' in html and 'id="confirm-create"' in html


def test_the_page_describes_the_seeded_server_types_with_tflops(alice_client):
    html = alice_client.get(URL).content.decode()
    assert "8× NVIDIA H100 SXM" in html and "8× NVIDIA B300 SXM" in html
    assert "96 vCPU · 2,048 GB memory · 1,600 Gb/s InfiniBand · 900 GB/s NVSwitch" in html
    assert "128 vCPU · 4,096 GB memory · 6,400 Gb/s InfiniBand · 1.8 TB/s NVSwitch" in html
    assert "1,979 TFLOPS FP8, 989 TFLOPS FP16 Tensor Core per GPU" in html
    assert "13,500 TFLOPS FP4, 4,500 TFLOPS FP8 Tensor Core per GPU" in html


def test_the_page_offers_the_allocations_for_the_summary(alice_client):
    response = alice_client.get(URL)
    data = response.context["server_types_data"]
    assert [a["gpus"] for a in data["g3"]["allocations"]] == [1, 2, 4, 8]
    assert data["g3"]["allocations"][0] == {"gpus": 1, "name": "at.g3v16b1", "vcpus": 16, "memory_gb": 512}
    assert (data["g2"]["on_demand"], data["g2"]["spot"]) == ("3.1000", "1.2400")
    assert 'id="server-types"' in response.content.decode()


def test_a_valid_post_creates_a_pending_job_and_lands_on_its_page(alice, alice_client, stored_script):
    response = alice_client.post(URL, form_post(
        learning_type="spot", name="bert-base.v2", framework="deepspeed", framework_version="0.18.9",
        server_type="g3", gpus_per_node="4", node_count="2", shm_size_gb="512",
        registry_username="robot", registry_password="s3cret", use_storage="on",
        volume_mount_path="/mnt/data", script_url=stored_script, command="  deepspeed train.py  ",
        **tag_post([{"key": "team", "value": "nlp"}, {"key": "", "value": ""}, {"key": "owner", "value": ""}]),
    ))
    job = TrainingJob.objects.get(owner=alice, name="bert-base.v2")
    assert response.status_code == 302 and response.url == job.get_absolute_url()
    assert job.status == JobStatus.PENDING
    assert (job.learning_type, job.framework, job.framework_version) == ("spot", "deepspeed", "0.18.9")
    assert (job.server_type.name, job.gpus_per_node, job.memory_gb, job.node_count, job.shm_size_gb) == ("g3", 4, 2048, 2, 512)
    assert (job.registry_username, job.registry_password()) == ("robot", "s3cret")
    assert (job.volume_mount_path, job.script_url, job.command) == ("/mnt/data", stored_script, "deepspeed train.py")
    assert list(job.tags.values_list("key", "value")) == [("owner", ""), ("team", "nlp")]
    page = alice_client.get(response.url).content.decode()
    assert "Training Job bert-base.v2 was created." in page and "bert-base.v2" in page


def test_memory_follows_the_allocation(alice, alice_client):
    alice_client.post(URL, form_post(server_type="g2", gpus_per_node="2"))
    assert TrainingJob.objects.get(owner=alice).memory_gb == 512


def test_a_blank_framework_version_takes_the_newest(alice, alice_client):
    alice_client.post(URL, form_post(framework="deepspeed", framework_version=""))
    assert TrainingJob.objects.get(owner=alice).framework_version == "0.18.9"


def test_storage_fields_are_ignored_unless_storage_is_used(alice, alice_client):
    alice_client.post(URL, form_post(volume_mount_path="/mnt/data", script_url="s3://scripts/train.py"))
    job = TrainingJob.objects.get(owner=alice)
    assert (job.volume_mount_path, job.script_url) == ("", "")


def test_it_asks_for_a_mount_path_or_a_script_when_storage_is_used(alice_client):
    response = alice_client.post(URL, form_post(use_storage="on"))
    assert field_errors(response.content) == {"volume_mount_path": ["Enter a File Storage volume mount path, a training script URL, or both."]}


def test_a_training_script_alone_is_a_storage_connection(alice, alice_client, stored_script):
    """The first job of the user guide: a script from object storage, no File Storage volume."""
    response = alice_client.post(URL, form_post(use_storage="on", script_url=stored_script))
    job = TrainingJob.objects.get(owner=alice)
    assert response.status_code == 302 and (job.volume_mount_path, job.script_url) == ("", stored_script)


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_it_shows_each_rule_next_to_its_field(alice, alice_client, case):
    response = alice_client.post(URL, form_post(**case.form))
    assert response.status_code == 200
    assert field_errors(response.content) == {case.field: [case.message]}
    assert not TrainingJob.objects.filter(owner=alice).exists()


def test_it_rejects_a_name_already_used_by_the_same_user(alice_client, make_job):
    make_job(name="llama-finetune")
    response = alice_client.post(URL, form_post(name="llama-finetune"))
    assert field_errors(response.content) == {"name": ["You already have a Training Job with this name."]}


def test_the_same_name_is_free_for_another_user(alice, alice_client, bob, make_job):
    make_job(owner=bob, name="llama-finetune")
    response = alice_client.post(URL, form_post(name="llama-finetune"))
    assert response.status_code == 302
    assert TrainingJob.objects.filter(name="llama-finetune").count() == 2


def test_it_shows_every_failing_field_at_once(alice_client):
    response = alice_client.post(URL, form_post(
        name="X", learning_type="spot", failover_enabled="on", image_url="", command="", node_count="0",
    ))
    assert set(field_errors(response.content)) == {"name", "failover_enabled", "command", "node_count"}
    assert "The Training Job was not created" in response.content.decode()


def test_it_keeps_the_entered_values_on_error(alice_client):
    rows = [{"key": "team", "value": "nlp"}, {"key": "team", "value": "cv"}]
    response = alice_client.post(URL, form_post(
        name="Bad_Name", learning_type="spot", server_type="g3", gpus_per_node="2", node_count="3",
        shm_size_gb="100", image_url="nvcr.io/nvidia/pytorch:24.05-py3", registry_username="robot",
        registry_password="s3cret", command="torchrun train.py --epochs 3", **tag_post(rows),
    ))
    html = response.content.decode()
    assert 'value="Bad_Name"' in html
    assert 'name="learning_type" value="spot" id="id_learning_type_1" checked>' in html
    assert 'name="server_type" value="g3" checked' in html
    assert '<option value="2" selected>' in html
    assert 'value="3"' in html and 'value="100"' in html
    assert 'value="nvcr.io/nvidia/pytorch:24.05-py3"' in html and 'value="robot"' in html
    assert "torchrun train.py --epochs 3</textarea>" in html
    assert html.count('name="tag_key" value="team"') == 2 and 'value="nlp"' in html and 'value="cv"' in html
    assert "s3cret" not in html  # the password is never rendered back


def test_tag_rows_are_posted_in_order_and_blank_rows_dropped(alice, alice_client):
    rows = tag_rows(50)
    alice_client.post(URL, form_post(**tag_post([*rows, {"key": " ", "value": ""}])))
    job = TrainingJob.objects.get(owner=alice)
    assert job.tags.count() == 50


def test_the_page_requires_a_login(db, client):
    response = client.get(URL)
    assert response.status_code == 302 and response.url.startswith(reverse("login"))
    assert client.post(URL, form_post()).status_code == 302
    assert not TrainingJob.objects.exists()
