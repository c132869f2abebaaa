"""Which console and token a command uses: the environment wins over the file `login` wrote."""

from __future__ import annotations

import stat

import pytest

from simpleai.config import Config, config_path, load, normalise_url, save
from simpleai.errors import AuthRefused, SimpleAIError, UsageError


def test_the_file_lives_under_xdg_config_home_or_else_home_config(tmp_path):
    assert config_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "simpleai" / "config"
    assert config_path({"HOME": "/home/ann"}) == config_path({"HOME": "/home/ann", "XDG_CONFIG_HOME": ""})
    assert str(config_path({"HOME": "/home/ann"})) == "/home/ann/.config/simpleai/config"


def test_it_saves_the_token_readable_by_its_owner_only_even_over_a_wider_file(tmp_path):
    path = tmp_path / "simpleai" / "config"
    path.parent.mkdir()
    path.write_text("old")
    path.chmod(0o644)
    save(Config("https://console.example.com", "abc123"), path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load({}, path) == Config("https://console.example.com", "abc123")


def test_a_new_directory_is_private_too(tmp_path):
    path = save(Config("https://c.example.com", "t"), tmp_path / "new" / "config")
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_each_environment_variable_wins_over_the_file(tmp_path):
    path = save(Config("https://file.example.com", "file-token"), tmp_path / "config")
    assert load({"SIMPLEAI_TOKEN": "env-token"}, path) == Config("https://file.example.com", "env-token")
    assert load({"SIMPLEAI_URL": "http://env.example.com/"}, path) == Config("http://env.example.com", "file-token")


def test_the_environment_alone_is_enough(tmp_path):
    env = {"SIMPLEAI_URL": "https://c.example.com", "SIMPLEAI_TOKEN": "t"}
    assert load(env, tmp_path / "missing") == Config("https://c.example.com", "t")


def test_no_console_says_how_to_configure_one(tmp_path):
    with pytest.raises(SimpleAIError, match=r"run `simpleai login URL`, or set SIMPLEAI_URL and SIMPLEAI_TOKEN"):
        load({}, tmp_path / "missing")


def test_no_token_points_at_the_account_page(tmp_path):
    with pytest.raises(AuthRefused, match=r"no API token: get one on your account page \(https://c.example.com/account/token/\)"):
        load({"SIMPLEAI_URL": "https://c.example.com"}, tmp_path / "missing")


@pytest.mark.parametrize("url", ["console.example.com", "ftp://c.example.com", "https://", ""])
def test_a_url_without_http_or_https_is_a_usage_error(url):
    with pytest.raises(UsageError, match="is not a console address"):
        normalise_url(url)
