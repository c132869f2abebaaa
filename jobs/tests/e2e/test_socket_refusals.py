"""Refused browser WebSockets, through real daphne and a real browser: the socket is accepted and
closed with 4401 (no session) or 4404 (no such job of yours), and the pages stop reconnecting
and say why ("This job was deleted", "Your session ended: log in again").

A refusal before the handshake would reach the browser as HTTP 403 / close code 1006, which a
page cannot tell from a network error: it would reconnect forever.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from django.conf import settings
from django.contrib.sessions.models import Session
from django.db import connection
from playwright.sync_api import expect, sync_playwright
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from console.lib.sockets import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from jobs import actions

from .helpers import create_job
from .test_logs_live import CHROMIUM_ARGS, session_cookie

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


# Each page's sockets, in the order it opened them, with the code each was closed with: what a
# page does with a refusal is only visible there (Playwright does not report close codes).
RECORD_SOCKETS = """
(() => {
  const Native = window.WebSocket;
  window.__sockets = [];
  window.WebSocket = function (url, protocols) {
    const socket = new Native(url, protocols);
    const record = { url: String(url), code: null };
    window.__sockets.push(record);
    socket.addEventListener("close", (e) => { record.code = e.code; });
    return socket;
  };
  Object.assign(window.WebSocket, { prototype: Native.prototype, CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 });
})();
"""


def not_yet_refused(*pages) -> list[str]:
    """The sockets of these pages whose latest connection was not refused with 4401 (a socket
    reconnects to its path with another query: the log socket asks for the lines after its last)."""
    waiting = []
    for page in pages:
        latest = {record["url"].split("?")[0]: record["code"] for record in page.evaluate("window.__sockets")}
        waiting += [f"{url} (last closed with {code})" for url, code in latest.items() if code != CLOSE_UNAUTHENTICATED]
    return waiting


def delete_outside_the_event_loop(job_id: int) -> None:
    """Delete as the console would: its live event is sent with async_to_sync, which cannot run
    in the thread where Playwright's sync API keeps an event loop."""
    def delete() -> None:
        try:
            actions.delete_job(job_id)
        finally:
            connection.close()

    thread = threading.Thread(target=delete)
    thread.start()
    thread.join(30)


def close_code(stack, path: str, cookie: dict | None) -> int:
    """Open a browser WebSocket on real daphne and return the code it is closed with."""
    headers = {"Origin": stack.url}
    if cookie:
        headers["Cookie"] = f"{cookie['name']}={cookie['value']}"
    with connect(stack.url.replace("http", "ws") + path, additional_headers=headers) as socket:
        with pytest.raises(ConnectionClosed):  # accepted (no HTTP 403), then closed at once
            socket.recv(timeout=5)
        return socket.close_code


@pytest.mark.parametrize("path", ["/ws/jobs/{id}/", "/ws/jobs/{id}/logs/", "/ws/jobs/"])
def test_daphne_refuses_a_socket_without_a_session_with_4401(alice, stack, path):
    job = create_job(alice, "no-session", "true")
    assert close_code(stack, path.format(id=job.pk), None) == CLOSE_UNAUTHENTICATED


@pytest.mark.parametrize("path", ["/ws/jobs/{id}/", "/ws/jobs/{id}/logs/"])
def test_daphne_refuses_someone_elses_or_a_deleted_job_with_4404(alice, bob, stack, path):
    job = create_job(alice, "alices", "true")
    assert close_code(stack, path.format(id=job.pk), session_cookie(bob, stack.url)) == CLOSE_NOT_FOUND
    actions.delete_job(job.pk)
    assert close_code(stack, path.format(id=job.pk), session_cookie(alice, stack.url)) == CLOSE_NOT_FOUND


@pytest.mark.browser
def test_pages_say_why_they_stopped_and_stop_reconnecting(alice, stack):
    deleted_live = create_job(alice, "deleted-while-watched", "true")
    deleted_away = create_job(alice, "deleted-while-away", "true")
    kept = create_job(alice, "kept", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        context.add_cookies([session_cookie(alice, stack.url)])
        context.add_init_script(RECORD_SOCKETS)
        pages = {}
        for name, path in [("live", f"/jobs/{deleted_live.pk}/?tab=logs"), ("away", f"/jobs/{deleted_away.pk}/?tab=logs"),
                           ("kept", f"/jobs/{kept.pk}/"), ("list", "/jobs/")]:
            pages[name] = context.new_page()
            pages[name].goto(stack.url + path)
        expect(pages["live"].locator("#log-state")).to_have_text("Live")
        expect(pages["list"].locator("#list-state")).to_have_text("Live")

        # 1. deleted while the page is open: the page hears it and says so
        delete_outside_the_event_loop(deleted_live.pk)
        expect(pages["live"].locator("#job-gone")).to_contain_text("This job was deleted.")
        expect(pages["live"].locator("#log-state")).to_have_text("Not live: this job was deleted")

        # 2. deleted while the console was away: the reconnect is refused with 4404
        stack.stop_console()
        delete_outside_the_event_loop(deleted_away.pk)
        stack.start_console()
        expect(pages["away"].locator("#job-gone")).to_contain_text("This job was deleted.", timeout=20_000)
        expect(pages["away"].locator("#job-status")).to_have_text("Deleted")
        pages["away"].screenshot(path=str(settings.BASE_DIR / "docs" / "screenshots" / "job-deleted.png"))

        # 3. the session ended while the console was away: 4401 on every page still live
        stack.stop_console()
        Session.objects.all().delete()
        stack.start_console()
        for name in ("kept", "list"):
            expect(pages[name].locator("#session-ended")).to_contain_text(
                "Your session ended: log in again", timeout=20_000)
        expect(pages["list"].locator("#list-state")).to_have_text("Not live: log in again")
        expect(pages["kept"].locator("#session-ended a")).to_have_attribute("href", f"/login/?next=%2Fjobs%2F{kept.pk}%2F")
        pages["kept"].screenshot(path=str(settings.BASE_DIR / "docs" / "screenshots" / "session-ended.png"))

        # every socket of the pages still live has come back once and been refused: a socket still
        # in its backoff when the console returned (up to 30 s after the outages) reconnects only
        # now, and the first refusal of a page already showed its notice (seen in CI)
        expect(pages["away"].locator("#log-state")).to_have_text("Not live: this job was deleted", timeout=40_000)
        deadline = time.monotonic() + 45
        while waiting := not_yet_refused(pages["kept"], pages["list"]):
            assert time.monotonic() < deadline, f"never came back to be refused: {waiting}"
            pages["kept"].wait_for_timeout(500)
        expect(pages["kept"].locator("#log-state")).to_have_text("Not live: log in again")
        # none of them tries again (a socket that did would be here within its 1 s backoff: a
        # refusal opens the socket first, which resets its backoff)
        attempts = {name: page.evaluate("window.__sockets.length") for name, page in pages.items()}
        pages["kept"].wait_for_timeout(6000)
        again = {name: page.evaluate("(seen) => window.__sockets.slice(seen)", attempts[name]) for name, page in pages.items()}
        assert not any(again.values()), again
        browser.close()


def test_a_socket_stopped_while_it_waits_to_reconnect_stays_stopped(alice, stack):
    """A page stops a socket (its job was deleted) while the socket waits out its backoff after a
    drop: it must not reconnect, or that socket's "open" puts back "Live" on a page that already
    said why it stopped."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        context = browser.new_context()
        context.add_cookies([session_cookie(alice, stack.url)])
        page = context.new_page()
        opened: list[str] = []
        page.on("websocket", lambda ws: opened.append(ws.url) if "no-such-socket" in ws.url else None)
        page.goto(stack.url + "/jobs/")
        events = page.evaluate("""() => new Promise((done) => {
            const seen = [];
            const socket = LiveSocket.open("/ws/no-such-socket/", {
                open() { seen.push("open"); },
                message() {},
                // dropped: the reconnect is scheduled right after this; the page stops it then
                retry() { seen.push("retry"); setTimeout(() => { socket.stop(); setTimeout(() => done(seen), 2500); }, 0); },
            });
        })""")
        browser.close()
    assert events == ["retry"]
    assert len(opened) == 1, opened  # the scheduled reconnect (after 1 s) never happened
