"""A whole project from a laptop: `simpleai run --workdir . --input data=./data --follow` with
the real CLI (a subprocess), a real console (daphne, Celery), SeaweedFS and a node agent.

The project is what an ML engineer has: train.py importing a module of the project, a config
file, a requirements.txt, and data beside it. The requirements are installed offline: the file
says `--no-index --find-links wheels` and the project carries the wheel (built here, pure
Python), so pip never needs the network; a package of a private index would work the same way.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token

from jobs.models import TrainingJob

from .test_cli import IMAGE, Cli

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

TRAIN = """\
import json, os, pathlib
import tinydep_e2e
from model import describe

config = json.loads(pathlib.Path("config/run.json").read_text())
words = pathlib.Path(os.environ["SIMPLEAI_INPUT_DATA"], "train.txt").read_text().split()
print(describe(config, words), "|", tinydep_e2e.GREETING, flush=True)
pathlib.Path(os.environ["OUTPUT_DIR"], "result.json").write_text(json.dumps({"words": len(words), "lr": config["lr"]}))
"""
MODEL = "def describe(config, words):\n    return f\"model lr={config['lr']} words={len(words)}\"\n"


def wheel(directory: Path, name: str, version: str, module: str, source: str) -> Path:
    """A pure-Python wheel of one module, written by hand (nothing to download to build it)."""
    dist = f"{name.replace('-', '_')}-{version}.dist-info"  # the escaped name, as pip reads it
    files = {
        f"{module}.py": source,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: simpleai-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(body.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(body.encode())}" for path, body in files.items()]
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    path = directory / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for name_in, body in files.items():
            archive.writestr(name_in, body)
    return path


@pytest.fixture
def laptop(tmp_path) -> Path:
    """~/work: the project (with a cache and a venv git would ignore) and its data beside it."""
    project = tmp_path / "work" / "project"
    for rel, text in {"train.py": TRAIN, "model.py": MODEL, "config/run.json": json.dumps({"lr": 0.25}),
                      "requirements.txt": "--no-index\n--find-links wheels\ntinydep-e2e==1.0\n",
                      ".gitignore": "__pycache__/\n.venv/\n", "__pycache__/model.cpython-311.pyc": "stale",
                      ".venv/bin/python": "not packed"}.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    wheel(project / "wheels", "tinydep-e2e", "1.0", "tinydep_e2e", 'GREETING = "hello from tinydep"\n')
    data = tmp_path / "work" / "data"
    data.mkdir()
    (data / "train.txt").write_text("the quick brown fox jumps\n")
    return tmp_path / "work"


@pytest.fixture
def cli(alice, stack, start_nodes, tmp_path) -> Cli:
    start_nodes("cli-project-node")
    runner = Cli(stack.url, Token.objects.create(user=alice).key, tmp_path)
    runner.env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # what it remembers of packed projects
    runner.login()
    return runner


def test_a_project_with_data_and_requirements_runs_from_the_laptop_and_its_results_come_back(cli, laptop, alice):
    cli.home = laptop / "project"  # the user runs the command in their project
    # nothing but the project, its data and the command (no image: the framework's environment)
    done = cli("run", "--name", "cli-project", "--workdir", ".", "--input", "data=../data",
               "--follow", "--", "python", "train.py")

    assert done.returncode == 0, done.stderr + done.stdout
    assert "model lr=0.25 words=5 | hello from tinydep" in done.stdout.splitlines()
    assert "simpleai: input data: 1 file, 26 B, uploaded 1 file (26 B)" in done.stderr
    [packed] = [line for line in done.stderr.splitlines() if line.startswith("simpleai: workdir: ")]
    assert packed.startswith("simpleai: workdir: 6 files, ") and packed.endswith(" s")  # uploaded in … s
    job = TrainingJob.objects.get(owner=alice, name="cli-project")
    assert job.workdir_url.startswith(f"s3://simpleai-u{alice.pk}/workdirs/")

    fetched = cli("download", "cli-project", "--to", str(laptop / "results"))
    assert fetched.returncode == 0, fetched.stderr
    [result] = list((laptop / "results").rglob("result.json"))
    assert json.loads(result.read_text()) == {"words": 5, "lr": 0.25}

    # the unchanged project and data: nothing is uploaded again
    again = cli("run", "--dry-run", "--name", "cli-project-2", "--image", IMAGE, "--workdir", ".",
                "--input", "data=../data", "--", "python", "train.py")
    assert again.returncode == 0, again.stderr
    assert f"already uploaded: {job.workdir_url}" in again.stderr
    assert "simpleai: input data: 1 file, 26 B, already uploaded" in again.stderr
