"""`make run` ends with one box: the console's address, the admin password, and the object
storage (its endpoint, and where each user finds their own keys), so none of it is lost among
start-up lines. The console's own storage keys are not in it: they never leave the console."""

from __future__ import annotations

from console.banner import ready_banner

ADMIN = "Created administrator 'admin' with password: Zq3-pass\nThis password is shown only once: keep it.\n"
LOCAL = {"S3_ENDPOINT_URL": "http://127.0.0.1:8333", "S3_ACCESS_KEY": "simpleai", "S3_SECRET_KEY": "simpleai-secret"}


def test_the_box_holds_the_url_the_password_and_where_users_find_their_keys():
    text = ready_banner("http://127.0.0.1:8000/", ADMIN, LOCAL, storage_is_local=True)
    lines = text.splitlines()
    assert lines[0].startswith("╔") and lines[-1].startswith("╚")
    assert len({len(line) for line in lines}) == 1  # a closed box: every line as wide as the frame
    body = "\n".join(line[2:-2].rstrip() for line in lines[1:-1])
    assert "Console       http://127.0.0.1:8000/" in body
    assert "Admin         Created administrator 'admin' with password: Zq3-pass" in body
    assert "  endpoint    http://127.0.0.1:8333" in body
    assert "  http://127.0.0.1:8000/account/   (keys, an upload form, aws cli and boto3 lines)" in body


def test_the_consoles_own_keys_are_not_printed():
    for local in (True, False):
        text = ready_banner("http://127.0.0.1:8000/", ADMIN, LOCAL, storage_is_local=local)
        assert "simpleai-secret" not in text and "AWS_ACCESS_KEY_ID" not in text and "access key" not in text


def test_without_object_storage_it_says_scripts_cannot_be_used():
    text = ready_banner("http://127.0.0.1:8000/", ADMIN, {}, storage_is_local=False)
    assert "Object storage: none configured (S3_ENDPOINT_URL)" in text and "aws " not in text
