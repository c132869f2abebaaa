"""The job file: the API's field names; flags override it; an export runs again as it was."""

from __future__ import annotations

import pytest
import yaml

from simpleai import jobfile
from simpleai.errors import UsageError

from .fake_console import job


def write(tmp_path, text: str):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def test_it_reads_the_apis_fields_with_tags_as_a_mapping(tmp_path):
    fields = jobfile.load(write(tmp_path, "name: bert\ngpus_per_node: 8\ntags: {team: nlp, empty: }\ncommand: [python, train.py, --run, a b]\n"))
    assert fields == {"name": "bert", "gpus_per_node": 8, "tags": [{"key": "team", "value": "nlp"}, {"key": "empty", "value": ""}],
                      "command": "python train.py --run 'a b'"}


def test_it_reads_tags_in_the_apis_own_form(tmp_path):
    assert jobfile.load(write(tmp_path, "tags:\n- {key: team, value: nlp}\n"))["tags"] == [{"key": "team", "value": "nlp"}]


@pytest.mark.parametrize(("text", "message"), [
    ("nodes: 2\n", r"unknown key\(s\) nodes; the keys are the API's fields: name, learning_type"),
    ("workdir: .\nworkdir_url: s3://b/workdirs/x.tar.gz\n", "give workdir .* or workdir_url .*, not both"),
    ("inputs: [data]\n", "inputs must be a mapping"),
    ("inputs: {data: }\n", "inputs must be a mapping"),
    ("- a\n- b\n", "must be a mapping of the API's field names"),
    ("name: [unclosed\n", "is not valid YAML"),
    ("tags: nlp\n", "tags must be a mapping"),
])
def test_a_file_it_cannot_use_is_a_usage_error_that_says_why(tmp_path, text, message):
    with pytest.raises(UsageError, match=message):
        jobfile.load(write(tmp_path, text))


def test_a_missing_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="cannot read the job file .*missing.yaml: No such file"):
        jobfile.load(tmp_path / "missing.yaml")


def test_an_empty_file_is_no_fields(tmp_path):
    assert jobfile.load(write(tmp_path, "")) == {}


def test_flags_override_the_file_and_tags_merge_by_key():
    file = {"name": "from-file", "gpus_per_node": 2, "tags": [{"key": "team", "value": "nlp"}, {"key": "stage", "value": "a"}]}
    flags = {"gpus_per_node": 8, "tags": [{"key": "stage", "value": "b"}, {"key": "new", "value": "1"}]}
    assert jobfile.merge(file, flags) == {
        "name": "from-file", "gpus_per_node": 8,
        "tags": [{"key": "team", "value": "nlp"}, {"key": "stage", "value": "b"}, {"key": "new", "value": "1"}],
    }


def test_the_files_tags_stay_when_no_tag_flag_is_given():
    assert jobfile.merge({"tags": [{"key": "a", "value": "1"}]}, {"name": "x"})["tags"] == [{"key": "a", "value": "1"}]


@pytest.mark.parametrize(("argv", "command"), [
    (["python", "train.py", "--lr", "0.1"], "python train.py --lr 0.1"),
    (["python", "train.py", "--run-name", "first try"], "python train.py --run-name 'first try'"),
    (["make data && python train.py"], "make data && python train.py"),
])
def test_the_command_is_what_follows_the_double_dash_as_written(argv, command):
    assert jobfile.command_from_argv(argv) == command


@pytest.mark.parametrize(("items", "tags"), [
    (["team=nlp", "empty=", "eq=a=b"], [{"key": "team", "value": "nlp"}, {"key": "empty", "value": ""}, {"key": "eq", "value": "a=b"}]),
])
def test_tag_arguments(items, tags):
    assert jobfile.parse_tags(items) == tags


@pytest.mark.parametrize("item", ["team", "=nlp"])
def test_a_tag_without_key_or_equals_is_a_usage_error(item):
    with pytest.raises(UsageError, match="a tag is KEY=VALUE"):
        jobfile.parse_tags([item])


def test_an_export_is_a_job_file_without_the_name_or_what_the_api_fills_in_for_nothing(tmp_path):
    shown = job(tags=[{"key": "team", "value": "nlp"}], registry_username="robot", has_registry_password=True)
    text = jobfile.export_text(shown)
    assert text.startswith("# Training Job 42 (bert), exported by `simpleai export`.")
    assert "add registry_password" in text
    fields = jobfile.load(write(tmp_path, text))
    assert "name" not in fields and "registry_password" not in fields and "status" not in fields
    assert "volume_mount_path" not in fields and "workspace" not in fields
    assert fields["registry_username"] == "robot" and fields["tags"] == [{"key": "team", "value": "nlp"}]
    assert {k: fields[k] for k in ("server_type", "gpus_per_node", "command", "framework_version")} == {
        "server_type": "g2", "gpus_per_node": 1, "command": "python train.py", "framework_version": "2.13.0"}
    assert list(yaml.safe_load(text)) == [f for f in jobfile.FIELDS if f in fields]  # the API's order


def test_a_new_name_is_a_valid_job_name():
    from datetime import UTC, datetime

    name = jobfile.new_name(datetime(2026, 12, 4, 18, 5, 9, tzinfo=UTC))
    assert name.startswith("job-20261204-180509-") and len(name) <= 63 and name == name.lower()


def test_workdir_and_local_inputs_are_relative_to_the_files_directory(tmp_path):
    (tmp_path / "jobs").mkdir()
    path = tmp_path / "jobs" / "job.yaml"
    path.write_text("workdir: ..\ninputs: {data: ../data, tok: s3://simpleai-u7/tok/, abs: /srv/x}\nfrom_checkpoint: pretrain\n")
    fields = jobfile.load(path)
    assert fields == {"workdir": str(tmp_path / "jobs" / ".."),
                      "inputs": {"data": str(tmp_path / "jobs" / "../data"), "tok": "s3://simpleai-u7/tok/", "abs": "/srv/x"},
                      "from_checkpoint": "pretrain"}


def test_inputs_in_the_apis_own_form():
    fields = jobfile.check({"inputs": [{"name": "data", "url": "s3://b/d/"}]}, "job.yaml")
    assert fields["inputs"] == {"data": "s3://b/d/"}


def test_input_flags_merge_over_the_files_by_name_and_a_workdir_flag_replaces_its_workdir_url(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    flags = {"inputs": jobfile.parse_inputs(["data=./local", "extra=s3://b/e"]), "workdir": str(tmp_path)}
    file = {"inputs": {"data": "s3://b/d/", "tok": "s3://b/t/"}, "workdir_url": "s3://b/workdirs/a.tar.gz"}
    assert jobfile.merge(file, flags) == {
        "inputs": {"data": str(tmp_path / "local"), "tok": "s3://b/t/", "extra": "s3://b/e"}, "workdir": str(tmp_path)}


@pytest.mark.parametrize("item", ["data", "=./x", "data="])
def test_an_input_without_name_or_place_is_a_usage_error(item):
    with pytest.raises(UsageError, match="an input is NAME=PATH or NAME=s3://bucket/prefix"):
        jobfile.parse_inputs([item])


def test_an_export_keeps_the_project_its_inputs_and_its_checkpoint_and_runs_again_as_it_was(tmp_path):
    shown = job(workdir_url="s3://simpleai-u7/workdirs/" + "a" * 64 + ".tar.gz", from_checkpoint=41,
                inputs=[{"name": "data", "url": "s3://simpleai-u7/inputs/" + "b" * 64 + "/"}], result_url="s3://x/jobs/42/")
    text = jobfile.export_text(shown)
    fields = jobfile.load(write(tmp_path, text))
    assert {k: fields[k] for k in ("workdir_url", "inputs", "from_checkpoint")} == {
        "workdir_url": shown["workdir_url"], "inputs": {"data": shown["inputs"][0]["url"]}, "from_checkpoint": 41}
    assert "result_url" not in fields
    plain = jobfile.load(write(tmp_path, jobfile.export_text(job(workdir_url="", inputs=[], from_checkpoint=None))))
    assert not {"workdir_url", "inputs", "from_checkpoint"} & set(plain)
