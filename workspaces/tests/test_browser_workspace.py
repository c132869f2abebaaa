"""One real browser: create a Training Workspace through the summary panel and the confirm dialog."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings

from jobs.tests import browser
from workspaces.models import Workspace
from workspaces.pricing import workspace_estimate

from .factories import make_node

SCREENSHOTS = Path(settings.BASE_DIR) / "docs" / "screenshots"
page, sync_api = browser.page, browser.sync_api  # the headless Chromium fixture and its API

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_a_user_creates_a_workspace_through_the_summary_and_confirm(live_server, page, alice):
    for name in ("gpu-01", "gpu-02", "gpu-03"):
        make_node(name)
    expect = sync_api.expect
    browser.log_in(page, live_server.url, alice.username)

    page.click("text=Training Workspace")  # the Service Home's menu
    page.click("#create-service")
    page.wait_for_url(f"{live_server.url}/workspaces/create/")
    page.fill("#id_name", "vision-team")
    page.check("input[name=server_type][value=g2]")
    expect(page.locator(".free-nodes[data-type=g2]")).to_have_text("3 free nodes now")
    page.select_option("#id_gpus_per_node", "8")
    expect(page.locator("#memory-display")).to_have_text("2,048 GB")
    page.fill("#id_node_count", "2")
    page.select_option("#id_contract_months", "3")

    # 2 nodes × 8 H100 at $3.10 less 20 % = $2.48 per GPU-hour: the server's own arithmetic
    from decimal import Decimal

    expected = workspace_estimate(Decimal("2.4800"), 8, 2, 3)
    monthly, total = f"${expected.monthly:,.2f}", f"${expected.contract_total:,.2f}"
    summary = page.locator("#summary-list")
    for text in ["vision-team", "at.g2v96h8 (8 GPU, 2,048 GB)", "3 months", "20% off on-demand", "$2.4800 per GPU-hour"]:
        expect(summary).to_contain_text(text)
    expect(page.locator("#summary-monthly")).to_have_text(monthly)
    expect(page.locator("#summary-total")).to_have_text(total)

    page.click("#create-button")
    expect(page.locator("#confirm-create")).to_be_visible()
    expect(page.locator("#confirm-name")).to_have_text("vision-team")
    expect(page.locator("#confirm-monthly")).to_have_text(monthly)
    expect(page.locator("#confirm-total")).to_have_text(total)
    assert not Workspace.objects.exists()  # nothing is created before the confirmation
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "workspace-create.png"), full_page=True)
    page.click("#confirm-create-button")

    page.wait_for_url(f"{live_server.url}/workspaces/")
    expect(page.locator(".messages")).to_contain_text("Training Workspace vision-team was created (Deployed).")
    row = page.locator("tr", has_text="vision-team")
    expect(row.locator(".status")).to_have_text("Deployed")
    expect(row).to_contain_text("2 / 2")
    expect(row).to_contain_text(monthly)
    ws = Workspace.objects.get(owner=alice)
    assert (ws.name, ws.node_count, ws.contract_months, ws.price_per_gpu_hour) == ("vision-team", 2, 3, Decimal("2.4800"))
    assert page.errors == []
