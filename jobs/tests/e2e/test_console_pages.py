"""The console a user trusts, in a real browser on a real daphne (WebSockets through Redis):
the live job list, an ended job's tabs, empty charts, Spot vs Job Failover in the form, the
error pages, and the user guide's first job (docs/user/first-job.md) exactly as it tells it. One Chromium for the module; screenshots go to docs/screenshots.

A missing Playwright or Chromium fails these tests: they are not skipped.
"""

from __future__ import annotations

import os
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.conf import settings
from django.db import connections
from playwright.sync_api import expect, sync_playwright

from jobs import actions, console_log
from jobs.choices import JobStatus
from jobs.models import TrainingJob
from monitoring import metrics_ingest

from .helpers import create_job
from .test_logs_live import CHROMIUM_ARGS, session_cookie

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

SCREENSHOTS = settings.BASE_DIR / "docs" / "screenshots"
SPOT_FAILOVER = "Spot Training cannot be used with Job Failover"


@pytest.fixture(scope="module")
def chromium():
    """One headless Chromium for every test of the module (Debian's, never a downloaded one)."""
    serialized = connections["default"]._test_serialized_contents
    with sync_playwright() as playwright:
        # While Playwright's loop runs, Django hands this thread other connection objects
        # (asgiref.local); the later tests' serialized rollback (which restores the seeded
        # server types) reads the test database's contents from them.
        connections["default"]._test_serialized_contents = serialized
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        yield browser
        browser.close()
        connections.close_all()  # the ORM's connection of Playwright's loop, before the database goes


@pytest.fixture
def page(chromium, stack, alice):
    """Alice's logged-in tab; every page error and console error is kept for the assertions."""
    context = chromium.new_context(viewport={"width": 1360, "height": 900})
    context.add_cookies([session_cookie(alice, stack.url)])
    tab = context.new_page()
    tab.set_default_timeout(15_000)
    tab.problems = []
    tab.on("pageerror", lambda exc: tab.problems.append(f"page error: {exc}"))
    tab.on("console", lambda msg: tab.problems.append(f"console: {msg.text} {msg.location.get('url')}") if msg.type == "error" else None)
    yield tab
    context.close()


def act(function, *args, **kwargs):
    """Call a jobs action off this thread: Playwright's event loop runs here, and an action
    publishes its live event with async_to_sync, which refuses to run inside a loop."""
    def call():
        try:
            return function(*args, **kwargs)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result()


def row(page, name: str):
    return page.locator("#job-rows tr", has_text=name)


def test_the_job_list_follows_jobs_without_reloading(alice, stack, page):
    earlier = act(create_job, alice, "finished-run", "echo done")
    for status, reason in [(JobStatus.CREATING, "Attempt 1 placed on gpu-07"), (JobStatus.RUNNING, "The command runs on every node"),
                           (JobStatus.COMPLETED, "Every node's command exited with code 0")]:
        act(actions.transition, earlier.pk, status, reason)
    page.goto(f"{stack.url}/jobs/")
    expect(page.locator("#list-state")).to_have_text("Live")
    loaded = page.evaluate("performance.timeOrigin")

    # a job created elsewhere (the API, another tab) appears; the scheduler's reason follows it
    job = act(create_job, alice, "llama-live", "torchrun train.py", node_count=2)
    expect(row(page, "llama-live").locator(".status")).to_have_text("Pending")
    expect(row(page, "llama-live").locator(".status-reason")).to_contain_text("Waiting for 2 × g2 nodes", timeout=20_000)

    # a status change and its reason, in place
    act(actions.transition, job.pk, JobStatus.CREATING, "Attempt 1 placed on gpu-01, gpu-02; preparing the environment")
    expect(row(page, "llama-live").locator(".status")).to_have_text("Creating")
    expect(row(page, "llama-live").locator(".status-reason")).to_have_text("Attempt 1 placed on gpu-01, gpu-02; preparing the environment")
    act(actions.transition, job.pk, JobStatus.RUNNING, "The command runs on every node")
    expect(row(page, "llama-live").locator(".status")).to_have_text("Running")
    act(create_job, alice, "bert-waiting", "python train.py")
    expect(row(page, "bert-waiting").locator(".status-reason")).to_contain_text("Waiting for 1 × g2 node", timeout=20_000)
    page.screenshot(path=str(SCREENSHOTS / "job-list-live.png"), full_page=True)

    # a deleted job goes away
    act(actions.transition, job.pk, JobStatus.STOPPED, "Stopped by the user")
    act(actions.delete_job, job.pk)
    expect(row(page, "llama-live")).to_have_count(0)
    expect(row(page, "finished-run")).to_have_count(1)
    assert page.evaluate("performance.timeOrigin") == loaded  # all of it without a reload
    assert page.problems == []


def test_rows_fetched_before_a_change_never_overwrite_it(alice, stack, page):
    """Seen in CI: a job appeared, its rows were fetched, and its next event asked for another
    fetch while the first was still on its way; the first answer, rendered before that event,
    came back last and the list showed the old state for good."""
    page.goto(f"{stack.url}/jobs/")
    expect(page.locator("#list-state")).to_have_text("Live")
    held = []  # the first fetch of the rows: rendered now, answered when the test says

    def hold_the_first(route):
        if held:
            route.continue_()
        else:
            held.append((route, route.fetch()))

    page.route("**/jobs/rows/**", hold_the_first)
    job = act(create_job, alice, "slow-rows", "torchrun train.py")
    deadline = time.monotonic() + 15
    while not held and time.monotonic() < deadline:
        page.wait_for_timeout(50)  # the job's event makes the page fetch its rows
    assert held, "the page did not fetch its rows for the new job"

    act(actions.transition, job.pk, JobStatus.CREATING, "Attempt 1 placed on gpu-03")
    page.wait_for_timeout(1500)  # the change's event arrives while the stale rows are on their way
    route, stale = held[0]
    route.fulfill(response=stale)

    expect(row(page, "slow-rows").locator(".status")).to_have_text("Creating", timeout=10_000)
    expect(row(page, "slow-rows").locator(".status-reason")).to_have_text("Attempt 1 placed on gpu-03")
    assert page.problems == []


def test_an_ended_jobs_tabs_do_not_say_live(alice, stack, page):
    job = act(create_job, alice, "ends-while-watched", "python train.py")
    act(actions.transition, job.pk, JobStatus.CREATING, "Attempt 1 placed on gpu-01")
    act(actions.transition, job.pk, JobStatus.RUNNING, "The command runs on every node")
    for text in ("[INFO] Starting the command: python train.py", "step 1 loss 0.93"):
        act(console_log.write, job.pk, "master", 1, text)
    page.goto(f"{stack.url}/jobs/{job.pk}/?tab=logs")
    expect(page.locator("#log-view")).to_contain_text("step 1 loss 0.93")
    expect(page.locator("#log-state")).to_have_text("Live")

    # the job ends while the page is open: the tab stops saying "Live"
    act(actions.transition, job.pk, JobStatus.COMPLETED, "Every node's command exited with code 0")
    expect(page.locator("#job-status")).to_have_text("Completed")
    expect(page.locator("#log-state")).to_have_text("Job Completed: every stored line is shown; no new lines will arrive")
    page.click(".tabs a[data-tab=monitoring]")
    expect(page.locator("#metrics-state")).to_contain_text("job Completed, no new samples", timeout=20_000)

    # and so it is when the page is opened after the end
    page.goto(f"{stack.url}/jobs/{job.pk}/?tab=logs")
    expect(page.locator("#log-state")).to_have_text("Job Completed: every stored line is shown; no new lines will arrive")
    page.screenshot(path=str(SCREENSHOTS / "job-logs-completed.png"))
    page.goto(f"{stack.url}/jobs/{job.pk}/?tab=monitoring")
    expect(page.locator("#metrics-state")).to_contain_text("job Completed, no new samples", timeout=20_000)
    expect(page.locator("#metrics-state")).not_to_contain_text("Live")
    assert page.problems == []


def test_an_empty_chart_says_no_data_yet_without_empty_axes(alice, stack, page):
    job = act(create_job, alice, "no-samples-yet", "python train.py")
    act(actions.transition, job.pk, JobStatus.CREATING, "Attempt 1 placed on gpu-01")
    act(actions.transition, job.pk, JobStatus.RUNNING, "The command runs on every node")
    page.goto(f"{stack.url}/jobs/{job.pk}/?tab=monitoring")

    loss = page.locator('.chart[data-metric="TrainingLoss"]')
    expect(loss.locator(".main-svg").first).to_be_visible(timeout=20_000)
    expect(loss).to_have_attribute("data-empty", "true")
    expect(loss.locator(".annotation-text").first).to_have_text("No data yet")
    # and how a script reports it (docs/user/metrics.md)
    expect(loss.locator(".annotation-text").nth(1)).to_have_text('Your script reports it by printing a lineSIMPLEAI_METRIC {"step": 10, "loss": 0.5}')
    assert loss.locator(".xtick, .ytick").count() == 0  # no "00:00:00" ticks, no "0" under them
    expect(page.locator("#metrics-state")).to_contain_text("Live")
    page.screenshot(path=str(SCREENSHOTS / "job-monitoring-empty.png"), full_page=True)

    # its first sample: a point on a readable time axis (not one second printed on every tick)
    act(metrics_ingest.store_samples, "gpu-01", metrics_ingest.parse([["TrainingLoss", time.time(), 2.5, {"job": job.pk, "stream": "master"}]]))
    page.reload()
    expect(loss).to_have_attribute("data-points", "1", timeout=20_000)
    page.wait_for_function("document.querySelectorAll('[data-metric=TrainingLoss] .xtick text').length >= 2")
    ticks = loss.locator(".xtick text").evaluate_all("texts => texts.map((t) => t.textContent)")
    assert len(ticks) >= 2 and len(set(ticks)) == len(ticks), ticks
    assert page.problems == []


def test_spot_and_job_failover_exclude_each_other_in_the_form(stack, page):
    page.goto(f"{stack.url}/jobs/create/")
    spot = page.locator('input[name="learning_type"][value="spot"]')
    failover = page.locator("#id_failover_enabled")
    expect(page.locator("#spot-conflict")).to_be_hidden()
    expect(page.locator("#failover-conflict")).to_be_hidden()

    failover.check()
    expect(spot).to_be_disabled()
    expect(page.locator("#spot-conflict")).to_be_visible()
    expect(page.locator("#spot-conflict")).to_have_text(SPOT_FAILOVER)
    page.locator("#area-required").screenshot(path=str(SCREENSHOTS / "create-job-failover-disables-spot.png"))
    failover.uncheck()
    expect(spot).to_be_enabled()

    spot.check()
    expect(failover).to_be_disabled()
    expect(failover).not_to_be_checked()
    expect(page.locator("#failover-conflict")).to_be_visible()
    expect(page.locator("#failover-conflict")).to_have_text(SPOT_FAILOVER)
    expect(page.locator("#summary-list")).to_contain_text("Not used")
    page.locator("#area-service").screenshot(path=str(SCREENSHOTS / "create-job-spot-disables-failover.png"))
    page.check('input[name="learning_type"][value="on_demand"]')
    expect(failover).to_be_enabled()
    assert page.problems == []


def test_error_pages_keep_the_layout_and_a_way_back(stack, page):
    page.goto(f"{stack.url}/jobs/999999/")
    expect(page.locator("#error-page h1")).to_have_text("Page not found")
    expect(page.locator(".topbar")).to_contain_text("alice")
    page.screenshot(path=str(SCREENSHOTS / "not-found.png"))
    page.click("text=Training Jobs >> nth=-1")  # the page's own link back
    expect(page).to_have_url(f"{stack.url}/jobs/")

    page.goto(f"{stack.url}/nodes/")
    expect(page.locator("#error-page h1")).to_have_text("Staff only")
    expect(page.locator("#error-page")).to_contain_text("for the console's staff")
    page.screenshot(path=str(SCREENSHOTS / "staff-only.png"))
    page.click("#go-back")
    expect(page).to_have_url(f"{stack.url}/jobs/")

    icon = page.request.get(f"{stack.url}/favicon.ico")
    assert icon.status == 200 and icon.headers["content-type"] == "image/x-icon"
    # the 404 and 403 answers themselves are the only console errors: no favicon 404 anywhere
    assert all("favicon" not in problem and ("404" in problem or "403" in problem) for problem in page.problems), page.problems


# -- the user guide's first job: log in (a session here; the form: jobs/tests/test_browser.py),
# upload its train.py from the account page, create it with its values, land on its page, see it
# Completed with its log and loss curve
FIRST_JOB = settings.BASE_DIR / "docs" / "user" / "first-job.md"


def docs_train_py() -> str:
    """The page's train.py, as a reader copies it."""
    return re.search(r"Save this as `train.py`.*?```python\n(.*?)```", FIRST_JOB.read_text(), re.S).group(1)


def docs_values() -> dict[str, str]:
    """The page's table of what to fill in (field → value)."""
    rows = re.findall(r"^\| (.+?) \| `([^`]+)`", FIRST_JOB.read_text(), re.M)
    return dict(rows)


@pytest.mark.duration(40)
def test_the_first_job_runs_as_the_user_guide_tells_it(alice, stack, start_nodes, e2e_settings, page, tmp_path):
    # a GPU sample every second: the docs' job runs for seconds, and the default 10 s may fall outside it
    start_nodes("local-node-1", extra=("--metrics-interval", "1"))
    script = tmp_path / "train.py"
    script.write_text(docs_train_py())
    values = docs_values()
    assert (values["Training Job name"], values["Command"]) == ("first-job", "python train.py")

    # 1. logged in (the login form itself: jobs/tests/test_browser.py), on the Service Home
    page.goto(f"{stack.url}/")
    # 3. upload it: the user name in the header opens the account page
    page.click("a.who")
    page.set_input_files("#upload-file", str(script))
    page.click("#upload-button")
    expect(page.locator("#upload-result")).to_be_visible(timeout=30_000)
    url = page.locator("#upload-url").inner_text()
    assert url == f"s3://simpleai-u{alice.pk}/uploads/train.py"

    # 4. create the job: Training Jobs › Create Training Job, the defaults and the page's values
    page.click(".topbar nav a:has-text(\"Training Jobs\")")
    page.click("text=Create Training Job")
    page.fill("#id_name", values["Training Job name"])
    page.fill("#id_image_url", "python:3.11")
    page.check("#id_use_storage")
    page.fill("#id_script_url", url)
    page.fill("#id_command", values["Command"])
    page.click("#create-button")
    with page.expect_navigation():
        page.click("#confirm-create-button")
    assert "/create/" not in page.url, page.locator("p.error").all_inner_texts()  # the form's own refusals

    # 5. watch it: the console lands on the new job's page, which follows it to Completed
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = TrainingJob.objects.get(owner=alice, name="first-job")
    assert page.url == f"{stack.url}/jobs/{job.pk}/"
    expect(page.locator("#job-status")).to_have_text("Completed", timeout=90_000)
    expect(page.locator("#job-status-reason")).to_have_text("The command exited with code 0")
    page.click(".tabs a[data-tab=logs]")
    log = page.locator("#log-view")
    expect(log).to_contain_text("done: weight 2.99, bias 1.01")
    expect(log).to_contain_text(f"Output uploaded to s3://simpleai-u{alice.pk}/jobs/{job.pk}/attempt-1/master (1 file)")
    expect(log).not_to_contain_text("sidecar container")  # the process runtime runs no container
    page.click(".tabs a[data-tab=monitoring]")
    loss = page.locator('.chart[data-metric="TrainingLoss"]')
    expect(loss).to_have_attribute("data-empty", "false", timeout=20_000)
    expect(page.locator("#metrics-simulated")).to_contain_text("Simulated GPUs on local-node-1", timeout=20_000)  # GPU samples ship apart from the loss
    page.screenshot(path=str(SCREENSHOTS / "first-job.png"), full_page=True)
    assert page.problems == []
