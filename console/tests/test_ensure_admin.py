"""`manage.py ensure_admin` creates a first administrator once and prints its password once."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = StringIO()
    call_command("ensure_admin", *args, stdout=out)
    return out.getvalue()


def test_it_creates_an_administrator_whose_printed_password_works():
    output = run()
    password = re.search(r"Created administrator 'admin' with password: (\S+)", output).group(1)
    user = authenticate(username="admin", password=password)
    assert user is not None and user.is_superuser and user.is_staff
    assert "shown only once" in output


def test_it_does_nothing_when_an_administrator_exists():
    run()
    output = run("--username", "other")
    assert "An administrator already exists" in output and "password:" not in output
    assert list(get_user_model().objects.values_list("username", flat=True)) == ["admin"]


def test_it_takes_another_user_name():
    run("--username", "root")
    assert get_user_model().objects.get(username="root").is_superuser


def test_two_runs_print_different_passwords_on_fresh_databases():
    first = re.search(r"password: (\S+)", run()).group(1)
    get_user_model().objects.all().delete()
    second = re.search(r"password: (\S+)", run()).group(1)
    assert first != second and len(first) >= 16


def test_it_refuses_to_take_over_a_plain_user_of_that_name():
    get_user_model().objects.create_user(username="admin", password="their-own-password")
    with pytest.raises(CommandError, match="'admin' exists but is not an administrator"):
        run()
    user = get_user_model().objects.get(username="admin")
    assert not user.is_superuser and user.check_password("their-own-password")
