"""The user guide's "Upload a training script" snippet (boto3, docs/user/storage.md) works as
written against a real S3 server with a user's own keys (as the account page shows them), and the
script it uploads passes the creation check, which reads it as that user (jobs.storage.checks).
Neither the README nor any page of the docs tells anyone to use the console's own keys."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from console import devserver
from console.services.objectstore import start_seaweedfs
from jobs.storage.checks import script_object_error
from jobs.storage.spaces import ensure_space
from jobs.tests.storage import client_with

ROOT = Path(settings.BASE_DIR)
UPLOAD_PAGE = ROOT / "docs" / "user" / "storage.md"


def section() -> str:
    return UPLOAD_PAGE.read_text()


def every_page() -> str:
    return "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))])


def boto3_snippet() -> str:
    return re.search(r"With boto3 \(Python\):\n```python\n(.*?)```", section(), re.S).group(1)


@pytest.mark.django_db
def test_the_docs_boto3_upload_runs_with_ones_own_keys_and_the_console_accepts_the_script(
        alice, object_storage_settings, object_store, tmp_path):
    snippet = boto3_snippet()
    assert 'ENDPOINT, BUCKET = "http://127.0.0.1:8333", "simpleai-u7"' in snippet  # make run's default endpoint
    space = ensure_space(alice.pk)
    code = (snippet.replace("http://127.0.0.1:8333", object_store.endpoint).replace("simpleai-u7", space.bucket)
            .replace("<your access key>", space.access_key).replace("<your secret key>", space.secret_key))
    (tmp_path / "train.py").write_text("print('hello from train.py')\n")

    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, timeout=60)

    url = f"s3://{space.bucket}/uploads/train.py"
    assert script_object_error(alice, url) is None
    mine = client_with(object_store.endpoint, space.access_key, space.secret_key)
    assert mine.get_object(Bucket=space.bucket, Key="uploads/train.py")["Body"].read() == b"print('hello from train.py')\n"


def test_the_docs_upload_with_ones_own_keys_never_the_consoles():
    defaults = inspect.signature(start_seaweedfs).parameters
    key, secret = defaults["access_key"].default, defaults["secret_key"].default
    port = re.search(r'"OBJECT_STORE_PORT", "(\d+)"', inspect.getsource(devserver)).group(1)
    text = section()
    assert "export AWS_ACCESS_KEY_ID=<your access key> AWS_SECRET_ACCESS_KEY=<your secret key>" in text
    assert f"aws --endpoint-url http://127.0.0.1:{port} s3 cp train.py s3://simpleai-u7/uploads/train.py" in text
    docs = every_page()
    assert secret not in docs and f"AWS_ACCESS_KEY_ID={key} " not in docs and f'aws_access_key_id="{key}"' not in docs
