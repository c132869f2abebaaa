"""The first job of the README and of docs/user/first-job.md works as written: both show the same
train.py, which runs on a CPU with the nodes' PyTorch, reports its loss in the line format the
agent turns into TrainingLoss, saves its model into OUTPUT_DIR and ends with the line the docs
quote; and the job file the two pages give is one the `simpleai` command accepts."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml
from django.conf import settings

from nodeagent.trainmetrics import TRAINING_LOSS, parse_line
from simpleai import jobfile

ROOT = Path(settings.BASE_DIR)
README = ROOT / "README.md"
FIRST_JOB = ROOT / "docs" / "user" / "first-job.md"


def python_block(text: str) -> str:
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def test_the_readme_and_the_user_guide_show_the_same_train_py():
    assert python_block(README.read_text()) == python_block(FIRST_JOB.read_text())


def test_the_docs_train_py_reports_its_loss_saves_its_model_and_prints_what_the_docs_quote(tmp_path):
    (tmp_path / "train.py").write_text(python_block(FIRST_JOB.read_text()))
    output = tmp_path / "output"
    output.mkdir()

    run = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env={"OUTPUT_DIR": str(output), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=120)

    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    losses = [parse_line(line)[TRAINING_LOSS] for line in lines if TRAINING_LOSS in parse_line(line)]
    assert len(losses) == 10 and losses[-1] < losses[0] / 10
    assert (output / "model.pt").stat().st_size > 0
    last = lines[-1]
    assert last == "done: weight 2.99, bias 1.01"
    for page in (FIRST_JOB, README):  # every quote of that line, wrapped as Markdown wraps it
        quoted = re.findall(r"`(done: [^`]*)`", " ".join(page.read_text().split()))
        assert quoted and set(quoted) == {last}


def test_the_docs_job_file_is_one_the_simpleai_command_accepts(tmp_path):
    page = re.search(r"cat > job.yaml <<'YAML'\n(.*?)YAML\n", FIRST_JOB.read_text(), re.S).group(1)
    printf = re.search(r"printf '(.*?)' > job.yaml", README.read_text()).group(1).replace("\\n", "\n")
    assert yaml.safe_load(printf) | {"name": "first-job-cli"} == yaml.safe_load(page)
    (tmp_path / "job.yaml").write_text(page)

    fields = jobfile.load(tmp_path / "job.yaml")

    assert fields["command"] == "python train.py" and fields["script_url"].endswith("/uploads/train.py")
