"""The README's "Upload a training script" snippet (boto3) works as written against a real S3
server, and the script it uploads passes the creation check (jobs.script_check)."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

from django.conf import settings

from console import devserver
from console.services.objectstore import start_seaweedfs
from jobs.script_check import script_object_error

README = Path(settings.BASE_DIR) / "README.md"


def boto3_snippet() -> str:
    section = README.read_text().split("### Upload a training script", 1)[1]
    return re.search(r"With boto3 \(Python\):\n```python\n(.*?)```", section, re.S).group(1)


def test_the_readmes_boto3_upload_runs_and_the_console_accepts_the_script(object_store, tmp_path, settings):
    snippet = boto3_snippet()
    assert 'endpoint_url="http://127.0.0.1:8333"' in snippet  # the documented default of `make run`
    (tmp_path / "train.py").write_text("print('hello from train.py')\n")
    code = snippet.replace("http://127.0.0.1:8333", object_store.endpoint)

    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, timeout=60)
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, timeout=60)  # twice: the bucket exists

    settings.S3_ENDPOINT_URL = object_store.endpoint
    settings.S3_ACCESS_KEY, settings.S3_SECRET_KEY = object_store.access_key, object_store.secret_key
    assert script_object_error("s3://scripts/train.py") is None
    body = object_store.client().get_object(Bucket="scripts", Key="train.py")["Body"].read()
    assert body == b"print('hello from train.py')\n"


def test_the_readmes_aws_cli_lines_match_the_make_run_defaults():
    defaults = inspect.signature(start_seaweedfs).parameters
    key, secret = defaults["access_key"].default, defaults["secret_key"].default
    port = re.search(r'"OBJECT_STORE_PORT", "(\d+)"', inspect.getsource(devserver)).group(1)
    section = README.read_text().split("### Upload a training script", 1)[1]
    assert f"export AWS_ACCESS_KEY_ID={key} AWS_SECRET_ACCESS_KEY={secret}" in section
    assert f"aws --endpoint-url http://127.0.0.1:{port} s3 cp train.py s3://scripts/train.py" in section
