"""What some tests need from the machine (a browser, root for containers, Slurm).

In CI (CI=true; .ci/run installs all of it) a missing piece fails the test: a skip there would
let a broken install pass unseen. Elsewhere it is a skip that says what is missing.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

from console.env import env_bool

IN_CI = env_bool("CI")
CHROMIUM = Path("/usr/bin/chromium")  # Debian's; Playwright's own browser download is not used


def unavailable(reason: str) -> NoReturn:
    """Fail in CI, skip elsewhere; `reason` says what is missing and how to get it."""
    if IN_CI:
        pytest.fail(f"{reason} — CI must run these tests", pytrace=False)
    pytest.skip(reason)


def playwright_sync_api() -> ModuleType:
    """playwright.sync_api, for a test module's top; without Playwright the module fails in CI
    and is skipped elsewhere (a plain import error would fail it everywhere)."""
    try:
        from playwright import sync_api
    except ImportError as missing:
        if IN_CI:
            pytest.fail(f"Playwright is not installed ({missing}) — CI must run the browser tests", pytrace=False)
        pytest.skip(f"Playwright is not installed ({missing}): pip install -r requirements.txt", allow_module_level=True)
    # Playwright's sync API runs an event loop in the test's thread; the ORM must still work there
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    return sync_api


def chromium_path() -> str:
    """Where the headless browser is; a missing one fails in CI and skips elsewhere."""
    if not CHROMIUM.exists():
        unavailable(f"no browser at {CHROMIUM} (apt-get install chromium)")
    return str(CHROMIUM)
