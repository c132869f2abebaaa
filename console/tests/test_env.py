"""Typed readers of settings from the environment: good values parse, bad ones fail loudly."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from console.env import database_from_url, env_bool, env_int, env_list, env_secret, env_str

BASE = Path("/srv/console")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """No ambient value of the variables under test leaks in."""
    for name in ["X", "X_FILE"]:
        monkeypatch.delenv(name, raising=False)


def test_env_str_reads_the_value_or_the_default(monkeypatch):
    assert env_str("X", "fallback") == "fallback"
    monkeypatch.setenv("X", "value")
    assert env_str("X", "fallback") == "value"


@pytest.mark.parametrize(("raw", "expected"), [
    ("1", True), ("true", True), ("YES", True), (" on ", True),
    ("0", False), ("false", False), ("No", False), ("off", False), ("", False),
])
def test_env_bool_reads_the_usual_spellings(monkeypatch, raw, expected):
    monkeypatch.setenv("X", raw)
    assert env_bool("X", not expected) is expected


def test_env_bool_uses_the_default_when_unset():
    assert env_bool("X", True) is True and env_bool("X", False) is False


@pytest.mark.parametrize("raw", ["2", "maybe", "enabled"])
def test_env_bool_refuses_other_values(monkeypatch, raw):
    monkeypatch.setenv("X", raw)
    with pytest.raises(ImproperlyConfigured, match="is not a boolean"):
        env_bool("X")


def test_env_int_reads_integers_and_defaults(monkeypatch):
    assert env_int("X", 20) == 20
    monkeypatch.setenv("X", "")
    assert env_int("X", 20) == 20
    monkeypatch.setenv("X", "50")
    assert env_int("X", 20, minimum=1) == 50


def test_env_int_refuses_a_non_integer(monkeypatch):
    monkeypatch.setenv("X", "twenty")
    with pytest.raises(ImproperlyConfigured, match="is not an integer"):
        env_int("X", 20)


def test_env_int_refuses_a_value_below_the_minimum(monkeypatch):
    monkeypatch.setenv("X", "0")
    with pytest.raises(ImproperlyConfigured, match="below the minimum 1"):
        env_int("X", 20, minimum=1)


def test_env_list_splits_on_commas(monkeypatch):
    assert env_list("X", ["a"]) == ["a"]
    monkeypatch.setenv("X", " console.example.com, ,10.0.0.5 ")
    assert env_list("X", ["a"]) == ["console.example.com", "10.0.0.5"]
    monkeypatch.setenv("X", "")
    assert env_list("X", ["a"]) == []


def test_env_secret_reads_the_variable(monkeypatch):
    assert env_secret("X", "default") == "default"
    monkeypatch.setenv("X", "s3cret")
    assert env_secret("X") == "s3cret"


def test_env_secret_prefers_the_file(monkeypatch, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("from-file\n")
    monkeypatch.setenv("X", "from-env")
    monkeypatch.setenv("X_FILE", str(secret))
    assert env_secret("X") == "from-file"


def test_env_secret_fails_loudly_on_an_unreadable_file(monkeypatch, tmp_path):
    monkeypatch.setenv("X_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match="X_FILE=.* cannot be read"):
        env_secret("X")


def test_no_database_url_means_the_private_postgresql_of_make_run():
    config = database_from_url("", BASE)
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert (config["NAME"], config["USER"], config["HOST"], config["PORT"]) == (
        "simpleai", "postgres", str(BASE / ".run" / "postgres" / "socket"), "5432",
    )


def test_no_database_url_beside_make_run_takes_its_private_postgresqls_password(tmp_path):
    """`manage.py` run by hand next to `make run` (whose PostgreSQL requires the password)."""
    (tmp_path / ".run" / "postgres").mkdir(parents=True)
    (tmp_path / ".run" / "postgres" / "password").write_text("pw-of-make-run\n")
    config = database_from_url("", tmp_path)
    assert (config["USER"], config["PASSWORD"]) == ("postgres", "pw-of-make-run")


@pytest.mark.parametrize("url", ["sqlite:////var/lib/console/db.sqlite3", "sqlite:///console.db"])
def test_sqlite_is_refused_with_what_to_do_instead(url):
    with pytest.raises(ImproperlyConfigured, match="SQLite is not supported.*make run"):
        database_from_url(url, BASE)


def test_a_socket_directory_and_port_in_the_query():
    config = database_from_url("postgres://postgres@/simpleai?host=/run/pg&port=5433", BASE)
    assert (config["HOST"], config["PORT"]) == ("/run/pg", "5433")


def test_a_postgres_url_gives_every_part():
    config = database_from_url("postgres://ops:p%40ss%2Fword@db.internal:6543/simpleai", BASE)
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert (config["NAME"], config["USER"], config["PASSWORD"]) == ("simpleai", "ops", "p@ss/word")
    assert (config["HOST"], config["PORT"]) == ("db.internal", "6543")


def test_a_postgres_url_without_port_or_password():
    config = database_from_url("postgresql://postgres@127.0.0.1/simpleai", BASE)
    assert (config["USER"], config["PASSWORD"], config["PORT"], config["NAME"]) == ("postgres", "", "", "simpleai")


def test_a_postgres_url_must_name_a_database():
    with pytest.raises(ImproperlyConfigured, match="names no database"):
        database_from_url("postgres://postgres@127.0.0.1:5432/", BASE)


def test_an_unsupported_scheme_is_refused():
    with pytest.raises(ImproperlyConfigured, match="'mysql' is not supported"):
        database_from_url("mysql://root@127.0.0.1/simpleai", BASE)
