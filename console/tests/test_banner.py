"""`make run` ends with one box: the console's address, the admin password, and the object
storage (endpoint, keys, how to upload a script), so none of it is lost among start-up lines."""

from __future__ import annotations

from console.banner import SCRIPT_URL, ready_banner

ADMIN = "Created administrator 'admin' with password: Zq3-pass\nThis password is shown only once: keep it.\n"
LOCAL = {"S3_ENDPOINT_URL": "http://127.0.0.1:8333", "S3_ACCESS_KEY": "simpleai", "S3_SECRET_KEY": "simpleai-secret"}


def test_the_box_holds_the_url_the_password_and_the_storage_keys():
    text = ready_banner("http://127.0.0.1:8000/", ADMIN, LOCAL, storage_is_local=True)
    lines = text.splitlines()
    assert lines[0].startswith("╔") and lines[-1].startswith("╚")
    assert len({len(line) for line in lines}) == 1  # a closed box: every line as wide as the frame
    body = "\n".join(line[2:-2].rstrip() for line in lines[1:-1])
    assert "Console       http://127.0.0.1:8000/" in body
    assert "Admin         Created administrator 'admin' with password: Zq3-pass" in body
    assert "  endpoint    http://127.0.0.1:8333" in body
    assert "  access key  simpleai" in body and "  secret key  simpleai-secret" in body
    assert f"  aws --endpoint-url http://127.0.0.1:8333 s3 cp train.py {SCRIPT_URL}" in body
    assert "export AWS_ACCESS_KEY_ID=simpleai AWS_SECRET_ACCESS_KEY=simpleai-secret" in body


def test_an_external_stores_secret_is_not_printed():
    external = {"S3_ENDPOINT_URL": "https://s3.example.com", "S3_ACCESS_KEY": "AKIAEXAMPLE", "S3_SECRET_KEY": "very-secret"}
    text = ready_banner("http://127.0.0.1:8000/", "An administrator already exists; log in with its password.", external, storage_is_local=False)
    assert "very-secret" not in text
    assert "secret key  (as set in S3_SECRET_KEY)" in text and "AKIAEXAMPLE" in text
    assert "An administrator already exists" in text


def test_without_object_storage_it_says_scripts_cannot_be_used():
    text = ready_banner("http://127.0.0.1:8000/", ADMIN, {}, storage_is_local=False)
    assert "Object storage: none configured (S3_ENDPOINT_URL)" in text and "aws " not in text
