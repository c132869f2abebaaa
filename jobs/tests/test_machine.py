"""A test that needs a browser, root or Slurm fails in CI when that is missing, and is skipped
(saying what is missing) on a developer's machine."""

from __future__ import annotations

import pytest

from jobs.tests import machine


def test_a_missing_browser_fails_in_ci(monkeypatch, tmp_path):
    monkeypatch.setattr(machine, "IN_CI", True)
    monkeypatch.setattr(machine, "CHROMIUM", tmp_path / "chromium")
    with pytest.raises(pytest.fail.Exception, match=r"no browser at .*chromium .*CI must run these tests"):
        machine.chromium_path()


def test_a_missing_browser_is_skipped_elsewhere_saying_so(monkeypatch, tmp_path):
    monkeypatch.setattr(machine, "IN_CI", False)
    monkeypatch.setattr(machine, "CHROMIUM", tmp_path / "chromium")
    with pytest.raises(pytest.skip.Exception, match=r"apt-get install chromium"):
        machine.chromium_path()


def test_a_present_browser_is_used(monkeypatch, tmp_path):
    (tmp_path / "chromium").touch()
    monkeypatch.setattr(machine, "IN_CI", True)
    monkeypatch.setattr(machine, "CHROMIUM", tmp_path / "chromium")
    assert machine.chromium_path() == str(tmp_path / "chromium")
