"""One real browser: log in, fill every area of the creation page, confirm, land on the job's page and find it Pending."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings

from jobs.choices import JobStatus
from jobs.models import TrainingJob

from . import browser

SCREENSHOTS = Path(settings.BASE_DIR) / "docs" / "screenshots"
page, sync_api = browser.page, browser.sync_api  # the headless Chromium fixture and its API

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def test_a_user_creates_a_job_in_the_browser(live_server, page, stored_script, alice):
    expect = sync_api.expect
    browser.log_in(page, live_server.url, alice.username)

    page.goto(f"{live_server.url}/jobs/create/")
    # the stylesheet is served: the summary panel sits beside the form
    expect(page.locator("#summary")).to_have_css("position", "sticky")

    # Required information
    page.check("input[name=learning_type][value=on_demand]")
    page.fill("#id_name", "bert-large.v1")
    page.select_option("#id_framework", "deepspeed")
    expect(page.locator("#id_framework_version")).to_have_value("0.18.9")
    page.select_option("#id_framework_version", "0.18.9")
    # Service information
    page.check("#id_failover_enabled")
    page.check("input[name=server_type][value=g3]")
    expect(page.locator("#id_gpus_per_node option").first).to_contain_text("at.g3v16b1")
    page.select_option("#id_gpus_per_node", "2")
    expect(page.locator("#memory-display")).to_have_text("1,024 GB")
    page.fill("#id_node_count", "2")
    page.fill("#id_shm_size_gb", "256")
    # AI Training Image
    page.fill("#id_image_url", "nvcr.io/nvidia/pytorch:24.05-py3")
    page.fill("#id_registry_username", "robot")
    page.fill("#id_registry_password", "s3cret-pass")
    # Training command and volume
    expect(page.locator("#storage-fields")).to_be_hidden()
    page.check("#id_use_storage")
    expect(page.locator("#storage-fields")).to_be_visible()
    page.fill("#id_volume_mount_path", "/mnt/data")
    page.fill("#id_script_url", stored_script)
    page.fill("#id_command", "deepspeed train.py --zero 3")
    # Tags
    for key, value in [("team", "nlp"), ("project", "bert")]:
        page.click("#add-tag")
        page.locator(".tag-row input[name=tag_key]").last.fill(key)
        page.locator(".tag-row input[name=tag_value]").last.fill(value)

    # the summary shows every choice and the price: 2 nodes × 2 B300 at 6.40 an hour
    summary = page.locator("#summary-list")
    for text in [
        "On-Demand Training", "bert-large.v1", "DeepSpeed 0.18.9", "Use", "g3", "at.g3v32b2 (2 GPU, 1,024 GB)",
        "256 GB", "nvcr.io/nvidia/pytorch:24.05-py3", "robot", "/mnt/data", stored_script,
        "deepspeed train.py --zero 3",
    ]:
        expect(summary).to_contain_text(text)
    expect(page.locator("#summary-price")).to_have_text("$25.60")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")  # the summary is sticky: show it at its place
    page.screenshot(path=str(SCREENSHOTS / "create-job.png"), full_page=True)

    page.click("#create-button")
    dialog = page.locator("#confirm-create")
    expect(dialog).to_be_visible()
    expect(page.locator("#confirm-name")).to_have_text("bert-large.v1")
    expect(page.locator("#confirm-price")).to_have_text("$25.60")
    assert not TrainingJob.objects.exists()  # nothing is created before the confirmation
    page.click("#confirm-create-button")

    # the console lands on the new job's page, where its status, logs and metrics appear
    job = TrainingJob.objects.get(owner=alice)
    page.wait_for_url(f"{live_server.url}/jobs/{job.pk}/")
    expect(page.locator(".messages")).to_contain_text("Training Job bert-large.v1 was created.")
    expect(page.locator("#job-status")).to_have_text("Pending")
    page.goto(f"{live_server.url}/jobs/")
    row = page.locator("tr", has_text="bert-large.v1")
    expect(row.locator(".status")).to_have_text("Pending")
    expect(row).to_contain_text("2 × 2")
    expect(row).to_contain_text("team=nlp")

    assert (job.name, job.status, job.framework_version, job.failover_enabled) == ("bert-large.v1", JobStatus.PENDING, "0.18.9", True)
    assert (job.server_type.name, job.gpus_per_node, job.memory_gb, job.node_count, job.shm_size_gb) == ("g3", 2, 1024, 2, 256)
    assert job.registry_password() == "s3cret-pass"
    assert sorted(job.tags.values_list("key", "value")) == [("project", "bert"), ("team", "nlp")]
    assert page.errors == []
