"""The plain rules of a job's project fields (jobs.validation): workdir_url, inputs,
from_checkpoint, and the form's "Inputs" box. No database, no storage: the owner's bucket is
an argument."""

from __future__ import annotations

import pytest

from jobs.tests.test_validation import CATALOGUE, valid
from jobs.validation import (
    MAX_INPUTS,
    from_checkpoint_error,
    inputs_error,
    inputs_text,
    parse_inputs_text,
    validate_job,
    workdir_sha256,
    workdir_url_error,
)

BUCKET = "simpleai-u7"
SHA = "ab" * 32
WORKDIR = f"s3://{BUCKET}/workdirs/{SHA}.tar.gz"


def test_a_workdir_in_ones_own_workdirs_is_accepted_and_names_its_hash():
    assert workdir_url_error(WORKDIR, BUCKET) is None
    assert workdir_url_error("", BUCKET) is None  # optional
    assert workdir_sha256(WORKDIR) == SHA


@pytest.mark.parametrize(("url", "message"), [
    (f"s3://simpleai-u8/workdirs/{SHA}.tar.gz",
     f"s3://simpleai-u8/workdirs/{SHA}.tar.gz is not in your storage space (s3://{BUCKET}/)."),
    ("https://example.com/project.tar.gz",
     f"Enter the workdir as s3://{BUCKET}/workdirs/<sha256>.tar.gz (simpleai run --workdir uploads it there)."),
    (f"s3://{BUCKET}/workdirs/project.tar.gz",
     f"A workdir is s3://{BUCKET}/workdirs/<sha256 of the tarball, 64 lowercase hex digits>.tar.gz; "
     f"s3://{BUCKET}/workdirs/project.tar.gz is not."),
    (f"s3://{BUCKET}/uploads/{SHA}.tar.gz",
     f"A workdir is s3://{BUCKET}/workdirs/<sha256 of the tarball, 64 lowercase hex digits>.tar.gz; "
     f"s3://{BUCKET}/uploads/{SHA}.tar.gz is not."),
    (f"s3://{BUCKET}/workdirs/{SHA.upper()}.tar.gz",
     f"A workdir is s3://{BUCKET}/workdirs/<sha256 of the tarball, 64 lowercase hex digits>.tar.gz; "
     f"s3://{BUCKET}/workdirs/{SHA.upper()}.tar.gz is not."),
])
def test_it_refuses_a_workdir_that_is_not_a_packed_project_of_ones_own(url, message):
    assert workdir_url_error(url, BUCKET) == message


def _input(name: str, url: str = f"s3://{BUCKET}/data/") -> dict[str, str]:
    return {"name": name, "url": url}


def test_inputs_in_ones_own_bucket_are_accepted():
    assert inputs_error([], BUCKET) is None
    assert inputs_error([_input("train", f"s3://{BUCKET}/datasets/train/"), _input("VOCAB_2", f"s3://{BUCKET}/vocab.json"),
                         _input("x" * 32)], BUCKET) is None
    assert inputs_error([_input(f"d{i}") for i in range(MAX_INPUTS)], BUCKET) is None


@pytest.mark.parametrize(("inputs", "message"), [
    ("DATA=s3://x/y", 'Enter the inputs as a list of {"name": NAME, "url": "s3://…"}.'),
    ([{"name": "data"}], 'Each input is {"name": NAME, "url": "s3://…"}.'),
    ([{"name": "data", "url": 3}], 'Each input is {"name": NAME, "url": "s3://…"}.'),
    ([_input(f"d{i}") for i in range(MAX_INPUTS + 1)], "Add at most 16 inputs."),
    ([_input("my-data")], "Input name 'my-data': start with a letter, then letters, digits or '_', at most 32 "
                          "(it becomes $SIMPLEAI_INPUT_<NAME>)."),
    ([_input("_data")], "Input name '_data': start with a letter, then letters, digits or '_', at most 32 "
                        "(it becomes $SIMPLEAI_INPUT_<NAME>)."),
    ([_input("x" * 33)], f"Input name {'x' * 33!r}: start with a letter, then letters, digits or '_', at most 32 "
                         "(it becomes $SIMPLEAI_INPUT_<NAME>)."),
    ([_input("data"), _input("Data")], "Input names must be unique (whatever their case): 'Data' appears twice."),
    ([_input("data", "/home/me/data")], f"Input data: enter an object storage URL, s3://{BUCKET}/path or s3://{BUCKET}/prefix/."),
    ([_input("data", "s3://simpleai-u8/data/")], f"Input data: s3://simpleai-u8/data/ is not in your storage space (s3://{BUCKET}/)."),
    ([_input("data", f"s3://{BUCKET}/")], "Input data: name an object or a folder (prefix/) inside your bucket, not the bucket itself."),
    ([_input("data", f"s3://{BUCKET}/jobs/../../x")], "Input data: name an object or a folder (prefix/) inside your bucket, not the bucket itself."),
])
def test_it_refuses_inputs_that_would_not_work(inputs, message):
    assert inputs_error(inputs, BUCKET) == message


def test_the_inputs_box_takes_one_name_and_url_a_line():
    text = f"# datasets\nTRAIN = s3://{BUCKET}/train/\n\nvocab=s3://{BUCKET}/v.json?x=1\n"
    inputs, error = parse_inputs_text(text)
    assert error is None
    assert inputs == [_input("TRAIN", f"s3://{BUCKET}/train/"), _input("vocab", f"s3://{BUCKET}/v.json?x=1")]
    assert parse_inputs_text(inputs_text(inputs)) == (inputs, None)
    assert parse_inputs_text("TRAIN s3://b/x") == ([], "Line 1: write NAME=s3://bucket/path.")


@pytest.mark.parametrize("value", [None, "", 1, 42])
def test_a_job_id_or_nothing_is_a_from_checkpoint(value):
    assert from_checkpoint_error(value) is None


@pytest.mark.parametrize("value", [0, -3, "7", True, 1.5])
def test_anything_else_is_not_a_from_checkpoint(value):
    assert from_checkpoint_error(value) == "Enter the id of one of your Training Jobs."


def test_validate_job_checks_the_project_fields_against_the_owners_bucket():
    data = valid(workdir_url=WORKDIR, inputs=[_input("data")], from_checkpoint=3)
    assert validate_job(data, CATALOGUE, bucket=BUCKET) == {}
    errors = validate_job(data, CATALOGUE, bucket="simpleai-u8")
    assert set(errors) == {"workdir_url", "inputs"}


def test_a_blank_image_is_no_error_but_a_malformed_one_is():
    assert "image_url" not in validate_job(valid(image_url=""), CATALOGUE)
    assert "image_url" in validate_job(valid(image_url="https://x/y"), CATALOGUE)
