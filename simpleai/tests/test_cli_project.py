"""`simpleai run --workdir/--input/--from-checkpoint` and `simpleai download`: what is uploaded
to the user's storage (a real SeaweedFS) and what is sent to the console (a stand-in on loopback)."""

from __future__ import annotations

import io
import os

import pytest
import yaml

from simpleai.cli import main
from simpleai.cli.context import Context

from .conftest import storage_answer
from .fake_console import SERVER_TYPES, fake_console, job

JOBS = "/api/v1/training-jobs/"
STORAGE = "/api/v1/account/storage/"


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    """The CLI's cache of packed projects in the test's own directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def console(space):
    with fake_console() as fake:
        fake.on("GET", STORAGE, 200, storage_answer(space))
        fake.on("GET", "/api/v1/server-types/", 200, SERVER_TYPES)
        fake.on("POST", f"{JOBS}validate/", 200, {"name": "bert"})
        fake.on("POST", JOBS, 201, job())
        yield fake


def cli(console, *argv: str, env: dict | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = {"SIMPLEAI_URL": console.url, "SIMPLEAI_TOKEN": "good", "XDG_CACHE_HOME": os.environ["XDG_CACHE_HOME"], **(env or {})}
    return main(list(argv), Context(env=env, out=out, err=err)), out.getvalue(), err.getvalue()


def stored(space) -> dict[str, int]:
    from simpleai.storage import Storage

    return Storage(space).sizes("")


@pytest.fixture
def laptop(tmp_path):
    """A project with a module, a config, a requirements file and an ignored cache; data beside it."""
    project = tmp_path / "project"
    for rel, text in {"train.py": "import model\n", "model.py": "X = 1\n", "config/small.yaml": "lr: 0.1\n",
                      "requirements.txt": "tiny-dep==1.0\n", ".gitignore": "__pycache__/\n",
                      "__pycache__/model.pyc": "cache", ".git/HEAD": "ref"}.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.txt").write_text("hello world\n")
    return tmp_path


def requests(console, method: str, path: str) -> list[dict]:
    return [r for r in console.requests if (r["method"], r["path"]) == (method, path)]


def test_run_uploads_the_project_and_a_local_input_then_creates_the_job_with_their_urls(console, space, laptop):
    code, out, err = cli(console, "run", "--workdir", str(laptop / "project"), "--input", f"data={laptop / 'data'}",
                         "--input", "tok=s3://elsewhere/tok/", "--", "python", "train.py")
    assert (code, out) == (0, "42\n"), err
    keys = stored(space)
    [workdir] = [key for key in keys if key.startswith("workdirs/")]
    [data] = [key for key in keys if key.startswith("inputs/")]
    assert data.endswith("/train.txt") and keys[data] == 12
    created = requests(console, "POST", JOBS)[-1]["body"]
    assert created["workdir_url"] == f"s3://{space.bucket}/{workdir}" and created["command"] == "python train.py"
    assert created["inputs"] == [{"name": "data", "url": f"s3://{space.bucket}/{data.removesuffix('train.txt')}"},
                                 {"name": "tok", "url": "s3://elsewhere/tok/"}]
    # checked before anything was uploaded: without what was still to upload
    checked = requests(console, "POST", f"{JOBS}validate/")[-1]["body"]
    assert "workdir_url" not in checked and checked["inputs"] == [{"name": "tok", "url": "s3://elsewhere/tok/"}]
    assert "simpleai: workdir: 5 files, " in err and ", uploaded in " in err  # .git/ and __pycache__/ left out
    assert "simpleai: input data: 1 file, 12 B, uploaded 1 file (12 B)" in err

    again = cli(console, "run", "--workdir", str(laptop / "project"), "--input", f"data={laptop / 'data'}", "--", "python train.py")
    assert again[0] == 0 and "input data: 1 file, 12 B, already uploaded" in again[2]
    assert "simpleai: workdir: 5 files, 54 B, already uploaded\n" in again[2]  # not even packed again
    assert stored(space) == keys
    assert requests(console, "POST", JOBS)[-1]["body"]["workdir_url"] == created["workdir_url"]


def test_a_changed_project_or_one_gone_from_the_storage_is_packed_and_uploaded_again(console, space, laptop):
    from simpleai.storage import Storage

    argv = ("run", "--workdir", str(laptop / "project"), "--", "python train.py")
    assert cli(console, *argv)[0] == 0
    [first] = stored(space)
    (laptop / "project" / "model.py").write_text("X = 2\n")  # same size, another content
    code, _, err = cli(console, *argv)
    assert code == 0 and ", uploaded in " in err
    [second] = set(stored(space)) - {first}
    Storage(space).client.delete_object(Bucket=space.bucket, Key=second)  # emptied meanwhile
    code, _, err = cli(console, *argv)
    assert code == 0 and ", uploaded in " in err and second in stored(space)
    (laptop / "project" / "model.py").write_text("X = 1\n")  # back as it was first: that one is there
    code, _, err = cli(console, *argv)
    assert code == 0 and "(" in err and ", already uploaded" in err
    assert requests(console, "POST", JOBS)[-1]["body"]["workdir_url"] == f"s3://{space.bucket}/{first}"


def test_a_job_the_console_refuses_uploads_nothing(console, space, laptop):
    console.answers[("POST", f"{JOBS}validate/")] = []
    console.on("POST", f"{JOBS}validate/", 400, {"name": ["Enter 3 to 63 characters."]})
    code, out, err = cli(console, "run", "--name", "ab", "--workdir", str(laptop / "project"), "--", "python train.py")
    assert (code, out, err) == (1, "", "simpleai: name: Enter 3 to 63 characters.\n")
    assert stored(space) == {} and not requests(console, "POST", JOBS)


def test_a_project_over_the_cap_is_refused_before_anything_is_sent(console, space, laptop):
    (laptop / "project" / "weights.bin").write_bytes(b"\0" * (2 * 1024 * 1024))
    code, _, err = cli(console, "run", "--workdir", str(laptop / "project"), "--", "python train.py",
                       env={"SIMPLEAI_MAX_WORKDIR_MB": "1"})
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("simpleai: error: the project ") and "the biggest files: weights.bin (2.0 MB), " in err
    assert not [r for r in console.requests if r["method"] == "POST"] and stored(space) == {}


def test_a_missing_input_is_a_usage_error(console, space, laptop):
    code, _, err = cli(console, "run", "--input", f"data={laptop / 'nope'}", "--", "python train.py")
    assert (code, err) == (2, f"simpleai: error: input data: {laptop / 'nope'} does not exist\n")
    assert not [r for r in console.requests if r["method"] == "POST"]


def test_from_checkpoint_takes_a_jobs_name_and_sends_its_id(console):
    console.on("GET", JOBS, 200, {"count": 1, "next": None, "results": [job(id=7, name="pretrain")]})
    code, _, err = cli(console, "run", "--from-checkpoint", "pretrain", "--", "python train.py")
    assert code == 0, err
    assert requests(console, "POST", JOBS)[-1]["body"]["from_checkpoint"] == 7
    console.on("GET", JOBS, 200, {"count": 0, "next": None, "results": []})
    console.answers[("GET", JOBS)] = console.answers[("GET", JOBS)][-1:]
    assert cli(console, "run", "--from-checkpoint", "nope", "--", "x") == (
        1, "", "simpleai: you have no job with the id or name 'nope'\n")


def test_a_job_files_workdir_and_inputs_are_relative_to_it_and_flags_win(console, space, laptop):
    (laptop / "project" / "job.yaml").write_text("workdir: .\ninputs: {data: ../data}\ncommand: python train.py\nname: from-file\n")
    code, _, err = cli(console, "run", str(laptop / "project" / "job.yaml"), "--name", "from-flag")
    assert code == 0, err
    created = requests(console, "POST", JOBS)[-1]["body"]
    assert created["name"] == "from-flag" and created["workdir_url"].startswith(f"s3://{space.bucket}/workdirs/")
    assert [item["name"] for item in created["inputs"]] == ["data"]


def test_a_dry_run_uploads_nothing_and_shows_where_the_project_would_be(console, space, laptop):
    code, out, err = cli(console, "run", "--dry-run", "--workdir", str(laptop / "project"), "--", "python train.py")
    assert code == 0, err
    assert yaml.safe_load(out)["workdir_url"].startswith(f"s3://{space.bucket}/workdirs/")
    assert "not uploaded (a dry run)" in err and stored(space) == {}


def test_a_console_without_storage_is_one_line(console, laptop):
    console.answers[("GET", STORAGE)] = []
    console.on("GET", STORAGE, 404, {"detail": "This console has no object storage (S3_ENDPOINT_URL), so there is no storage space."})
    code, _, err = cli(console, "run", "--workdir", str(laptop / "project"), "--", "python train.py")
    assert (code, err) == (1, "simpleai: This console has no object storage (S3_ENDPOINT_URL), so there is no storage space.\n")


def test_download_fetches_the_jobs_results_into_a_directory_named_after_it(console, space, tmp_path, monkeypatch):
    from simpleai.storage import Storage

    Storage(space).client.put_object(Bucket=space.bucket, Key="jobs/42/attempt-1/master/model.pt", Body=b"weights")
    console.on("GET", f"{JOBS}42/", 200, job(status="Completed", result_url=f"s3://{space.bucket}/jobs/42/"))
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(console, "download", "42")
    assert (code, out) == (0, "")
    assert err.startswith("simpleai: downloaded 1 file (7 B) of job 42 (bert) to bert in ")
    assert (tmp_path / "bert" / "attempt-1" / "master" / "model.pt").read_bytes() == b"weights"
    code, _, _ = cli(console, "download", "42", "--to", str(tmp_path / "elsewhere"))
    assert code == 0 and (tmp_path / "elsewhere" / "attempt-1" / "master" / "model.pt").exists()


def test_download_of_a_job_without_results_says_why(console, space):
    console.on("GET", f"{JOBS}42/", 200, job(status="Running", result_url=f"s3://{space.bucket}/jobs/42/"))
    assert cli(console, "download", "42") == (
        1, "", f"simpleai: job 42 (bert) has no results at s3://{space.bucket}/jobs/42/: it has not ended yet\n")


def test_download_of_a_job_not_placed_yet_says_so(console):
    console.on("GET", f"{JOBS}42/", 200, job(result_url=""))
    assert cli(console, "download", "42") == (1, "", "simpleai: job 42 (bert) has no results: it has not started yet (Pending)\n")


def test_a_run_whose_inputs_are_uploaded_never_imports_boto3_even_for_a_new_project(console, space, laptop):
    import subprocess
    import sys
    from pathlib import Path

    argv = ["run", "--workdir", str(laptop / "project"), "--input", f"data={laptop / 'data'}", "--", "python train.py"]
    assert cli(console, *argv)[0] == 0
    (laptop / "project" / "model.py").write_text("X = 'changed'\n")
    code = f"import sys; from simpleai.cli import main; rc = main({argv!r}); print(rc, 'boto3' in sys.modules)"
    env = {"PATH": "/usr/bin:/bin", "SIMPLEAI_URL": console.url, "SIMPLEAI_TOKEN": "good",
           "XDG_CACHE_HOME": os.environ["XDG_CACHE_HOME"], "HOME": str(laptop)}
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["42", "0", "False"], done.stderr  # the id, the status, no boto3
    assert ", uploaded in " in done.stderr and "input data: 1 file, 12 B, already uploaded" in done.stderr
    assert len([key for key in stored(space) if key.startswith("workdirs/")]) == 2


def test_status_shows_the_project_its_inputs_the_checkpoint_and_where_the_results_are(console):
    console.on("GET", f"{JOBS}42/", 200, job(workdir_url="s3://b/workdirs/abc.tar.gz", from_checkpoint=7,
                                             inputs=[{"name": "data", "url": "s3://b/inputs/x/"}], result_url="s3://b/jobs/42/attempt-1/"))
    shown = cli(console, "status", "42")[1].splitlines()
    assert "  Workdir    s3://b/workdirs/abc.tar.gz" in shown and "  Input      data = s3://b/inputs/x/" in shown
    assert "  From       the checkpoint of job 7" in shown
    assert "  Results    s3://b/jobs/42/attempt-1/ (simpleai download 42)" in shown
