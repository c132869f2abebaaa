"""The Logs tab shows new lines of a running job without reloading (real browser, real daphne)."""

from __future__ import annotations

import os
import re

import pytest
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from playwright.sync_api import expect, sync_playwright

from jobs import actions

from .helpers import create_job, wait_for_status

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def session_cookie(user, url: str) -> dict:
    """A logged-in session stored in the database the console reads (no password round trip)."""
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    return {"name": settings.SESSION_COOKIE_NAME, "value": session.session_key, "url": url}


def test_the_logs_tab_shows_new_lines_without_reloading(alice, stack, start_nodes, tmp_path):
    start_nodes("node-a")
    command = "python -c 'import time\nfor i in range(400):\n    print(f\"tick {i} <script>alert(1)</script>\", flush=True); time.sleep(0.1)'"
    job = create_job(alice, "live-logs", command)
    wait_for_status(job.pk, "Running", timeout=60)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.add_cookies([session_cookie(alice, stack.url)])
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{stack.url}/jobs/{job.pk}/?tab=logs")
        view = page.locator("#log-view")
        expect(view).to_contain_text("Starting the command", timeout=15_000)
        expect(page.locator("#log-state")).to_have_text("Live")
        # a line printed after the page loaded arrives by itself
        expect(view).to_contain_text("tick ", timeout=15_000)
        last_seen = max(int(m) for m in re.findall(r"tick (\d+) ", view.inner_text()))
        expect(view).to_contain_text(f"tick {last_seen + 10} ", timeout=20_000)
        # a log line is text: the <script> in it is shown, not run
        expect(view).to_contain_text("<script>alert(1)</script>")
        assert page.evaluate("document.querySelectorAll('#log-view script').length") == 0
        page.screenshot(path=str(settings.BASE_DIR / "docs" / "screenshots" / "job-logs.png"))
        assert errors == []
        browser.close()
    actions.delete_job(job.pk)
