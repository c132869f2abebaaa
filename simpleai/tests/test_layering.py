"""simpleai runs where only its own directory was copied: it imports nothing of Django or the console."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONSOLE_PACKAGES = ("django", "rest_framework", "console", "jobs", "monitoring", "workspaces", "nodeagent")


def test_importing_every_module_loads_nothing_of_the_console():
    code = (
        "import sys, pkgutil, importlib, simpleai, simpleai.cli\n"
        "for m in pkgutil.walk_packages(simpleai.__path__, 'simpleai.'):\n"
        "    if '.tests' not in m.name and not m.name.endswith('__main__'): importlib.import_module(m.name)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {CONSOLE_PACKAGES!r}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                            env={"PATH": "/usr/bin:/bin"})
    assert result.stdout.strip() == "[]"


def test_python_dash_m_simpleai_runs():
    result = subprocess.run([sys.executable, "-m", "simpleai", "--version"], cwd=ROOT, capture_output=True, text=True)
    assert (result.returncode, result.stdout.strip()) == (0, "simpleai 0.1.0")
