"""The job file of docs/user/from-your-laptop.md is one the command reads as the page says."""

from __future__ import annotations

import re
from pathlib import Path

from simpleai import jobfile

PAGE = Path(__file__).resolve().parents[2] / "docs" / "user" / "from-your-laptop.md"


def test_the_pages_job_file_is_accepted_with_its_paths_relative_to_the_file(tmp_path):
    text = re.search(r"```yaml\n# gpt-mini/job.yaml\n(.*?)```", PAGE.read_text(), re.S).group(1)
    (tmp_path / "gpt-mini").mkdir()
    (tmp_path / "gpt-mini" / "job.yaml").write_text(text)
    fields = jobfile.load(tmp_path / "gpt-mini" / "job.yaml")
    assert fields["workdir"] == str(tmp_path / "gpt-mini" / ".")
    assert fields["inputs"] == {"shakespeare": str(tmp_path / "gpt-mini" / "../shakespeare"),
                                "tokenizer": "s3://simpleai-u7/tokenizers/gpt2/"}
    assert fields["from_checkpoint"] == "gpt-mini-pretrain" and fields["gpus_per_node"] == 8
