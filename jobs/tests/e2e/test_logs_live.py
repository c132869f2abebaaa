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


def test_the_logs_tab_shows_new_lines_without_reloading(alice, stack, start_nodes):
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



def test_the_logs_tab_misses_and_repeats_no_line_across_a_dropped_connection(alice, stack, start_nodes):
    """The page's Logs socket drops and cannot come back for 5 s while the job prints ~2,000
    lines (more than the 1,000-line backlog); it reconnects with its cursor and shows each
    line exactly once."""
    start_nodes("node-a")
    # the command starts printing once the page is watching: the signal reaches the sandboxed
    # command through Alice's File Storage share (its /tmp is its own)
    go = stack.share(alice.pk) / "go"
    command = ("while [ ! -e /mnt/sync/go ]; do sleep 0.1; done; "
               "python -c 'import time\nfor i in range(4000):\n    print(f\"tick {i}\", flush=True)\n"
               "    if i % 40 == 39: time.sleep(0.1)'")
    job = create_job(alice, "logs-across-a-drop", command, volume_mount_path="/mnt/sync")
    wait_for_status(job.pk, "Running", timeout=60)
    link = {"blocked": False, "open": None, "connects": 0}

    def route(socket):  # the page's Logs socket, through a switch the test can open
        if link["blocked"]:
            socket.close(code=4000, reason="network down")
            return
        socket.connect_to_server()
        link["open"], link["connects"] = socket, link["connects"] + 1

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.add_cookies([session_cookie(alice, stack.url)])
        page = context.new_page()
        page.route_web_socket(re.compile(r"/ws/jobs/\d+/logs/"), route)
        page.goto(f"{stack.url}/jobs/{job.pk}/?tab=logs")
        expect(page.locator("#log-state")).to_have_text("Live")
        go.touch()
        expect(page.locator("#log-view")).to_contain_text("tick 100", timeout=20_000)
        link["blocked"] = True
        link["open"].close(code=4000, reason="network down")
        expect(page.locator("#log-state")).to_have_text("Reconnecting…")
        page.wait_for_timeout(5000)  # the job goes on printing; the agent stores every line
        link["blocked"] = False
        wait_for_status(job.pk, "Completed", timeout=90)
        expect(page.locator("#log-view")).to_contain_text("tick 3999", timeout=30_000)
        shown = page.evaluate("Array.from(document.querySelectorAll('#log-view .log-line'), r => r.textContent)")
        browser.close()
    ticks = [int(m.group(1)) for text in shown if (m := re.search(r"\] tick (\d+)$", text))]
    assert link["connects"] == 2
    assert len(ticks) == len(set(ticks)), "a line is shown twice"
    assert sorted(ticks) == list(range(4000)), f"{4000 - len(set(ticks))} lines are missing"
    actions.delete_job(job.pk)
