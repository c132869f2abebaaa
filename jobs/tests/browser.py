"""The headless Chromium of the browser tests (jobs, workspaces): import `page` and `sync_api`.

Importing this module without Playwright fails in CI and skips the test module elsewhere
(jobs.tests.machine); so does the `page` fixture without the browser binary.
"""

from __future__ import annotations

import pytest
from django.db import connections

from .factories import PASSWORD
from .machine import chromium_path, playwright_sync_api

sync_api = playwright_sync_api()
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture
def page(live_server):
    """A headless Chromium page; everything it logs to its console is kept for the assertions."""
    executable = chromium_path()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(10_000)
        page.errors = []
        page.on("pageerror", lambda error: page.errors.append(str(error)))
        yield page
        browser.close()
        # While Playwright's loop runs, the ORM holds its own connection; close it before the
        # test database is dropped (Django keeps one per running loop, see asgiref.local).
        connections.close_all()


def log_in(page, base_url: str, username: str) -> None:
    """Log in through the login page as a user made by UserFactory; ends on the Service Home."""
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")
