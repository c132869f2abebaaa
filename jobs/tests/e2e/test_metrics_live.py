"""Metrics end to end: an agent with simulated GPUs runs a job; the API answers its per-GPU series
and the Monitoring tab draws them, then a new point arrives without reloading (real browser)."""

from __future__ import annotations

import os
import time

import pytest
from django.conf import settings
from playwright.sync_api import expect, sync_playwright

from jobs import actions
from jobs.models import Node, NodeToken

from .helpers import create_job, wait_for_status
from .stack import wait_until
from .test_logs_live import CHROMIUM_ARGS, session_cookie

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

# a script that prints its loss the documented way, and a Trainer-style dict every 10 steps
COMMAND = (
    "python -c 'import json, time\n"
    "for step in range(1, 1200):\n"
    "    print(\"SIMPLEAI_METRIC \" + json.dumps({\"step\": step, \"loss\": 3 / (1 + step / 20), \"throughput\": 250.0}), flush=True)\n"
    "    if step % 10 == 0: print({\"loss\": 3 / (1 + step / 20), \"learning_rate\": 5e-05 * (1 - step / 1200), \"epoch\": step / 400}, flush=True)\n"
    "    time.sleep(0.1)'"
)


@pytest.fixture
def fast_sampling_node(stack, transactional_db):
    """One agent with 8 simulated GPUs that samples every second (instead of every 10 s)."""
    _, token = NodeToken.mint("node-m")
    agent = stack.agent("node-m", token, extra=("--metrics-interval", "1"))
    wait_until(lambda: Node.objects.filter(name="node-m", connected=True).exists(), timeout=30, message="node-m to connect")
    yield agent
    agent.stop()
    stack.agents.remove(agent)


def series(client, job, metric: str, start: float) -> list[dict]:
    response = client.get(f"/api/v1/training-jobs/{job.pk}/metrics/", {"metric": metric, "start": start, "end": time.time() + 1, "period": 10})
    assert response.status_code == 200, response.content
    return response.json()["series"]


def trace_names(page, metric: str, count: int) -> list[str]:
    """The names of a chart's lines once it draws `count` of them (Plotly sets `.data` when it
    draws; a chart still waiting for its first samples, or redrawn for another device, has none yet)."""
    chart = f"document.querySelector('[data-metric={metric}]')"
    # one evaluation: a redraw between a wait and a second read leaves `.data` unset for a moment
    names = page.wait_for_function(
        f"(() => {{ const d = {chart}.data; return d && d.length === {count} ? d.map(t => t.name) : null; }})()",
        timeout=20_000,
    )
    return names.json_value()


def test_a_running_job_reports_per_gpu_metrics_to_the_api_and_live_to_the_monitoring_tab(alice, stack, fast_sampling_node):
    from rest_framework.test import APIClient

    started = time.time()
    job = create_job(alice, "metrics-live", COMMAND, gpus_per_node=2, memory_gb=512)
    wait_for_status(job.pk, "Running", timeout=60)
    api = APIClient()
    api.force_authenticate(alice)

    # the API: one line per GPU of the job's placement, and the script's loss on `master`; the
    # script mostly sleeps, and the simulated GPUs say so (nodeagent.metrics: they follow its CPU use)
    gpus = wait_until(lambda: (s := series(api, job, "GPUUtilization", started)) and len(s) == 2
                      and all(line["points"] for line in s) and s,
                      timeout=30, message="both GPUs' utilisation")
    assert all(p["value"] < 50 for line in gpus for p in line["points"][1:])
    # the node's GPUs are simulated (--gpus simulated:N): their lines say so
    assert [(line["label"], line["simulated"]) for line in gpus] == [("node-m GPU 0 (simulated)", True), ("node-m GPU 1 (simulated)", True)]
    loss = wait_until(lambda: series(api, job, "TrainingLoss", started), timeout=20, message="the loss")
    assert loss[0]["dimensions"] == {"stream": "master"} and loss[0]["points"][0]["value"] < 3
    assert wait_until(lambda: series(api, job, "TrainingLearningRate", started), timeout=20, message="the Trainer's learning rate")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 1350})
        context.add_cookies([session_cookie(alice, stack.url)])
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(f"{msg.text} {msg.location.get('url')}")
                if msg.type == "error" and not msg.location.get("url", "").endswith("/favicon.ico") else None)
        page.goto(f"{stack.url}/jobs/{job.pk}/?tab=monitoring")

        utilisation = page.locator('.chart[data-metric="GPUUtilization"]')
        expect(utilisation.locator(".main-svg").first).to_be_visible(timeout=20_000)
        expect(page.locator("#metrics-state")).to_contain_text("Live")
        assert trace_names(page, "GPUUtilization", 2) == ["node-m GPU 0 (simulated)", "node-m GPU 1 (simulated)"]
        expect(page.locator("#metrics-simulated")).to_contain_text("Simulated GPUs on node-m")
        expect(utilisation.locator(".gtitle")).to_contain_text("· simulated")
        assert trace_names(page, "TrainingLoss", 1) == ["master"]
        for metric in ("GPUMemoryUsed", "GPUTemperature", "GPUPowerDraw", "TrainingLearningRate"):
            expect(page.locator(f'.chart[data-metric="{metric}"] .main-svg').first).to_be_visible()
        # samples keep coming over the job's WebSocket: a new 10-second point is drawn by itself
        drawn = int(utilisation.get_attribute("data-points"))
        page.wait_for_function(f"Number(document.querySelector('[data-metric=GPUUtilization]').dataset.points) > {drawn}", timeout=25_000)
        page.screenshot(path=str(settings.BASE_DIR / "docs" / "screenshots" / "job-monitoring.png"), full_page=True)

        # the per-GPU view: every metric of one device
        page.select_option("#metrics-device", "node-m/1")
        expect(page.locator('.chart[data-metric="GPUSMClock"] .main-svg').first).to_be_visible(timeout=10_000)
        assert trace_names(page, "GPUTemperature", 1) == ["node-m GPU 1 (simulated)"]
        assert errors == []
        browser.close()
    actions.delete_job(job.pk)
