"""Uploads to and downloads from a user's storage space, against a real SeaweedFS."""

from __future__ import annotations

import hashlib
import io
import random
import tarfile

import pytest

from simpleai import packing
from simpleai.errors import SimpleAIError, UsageError
from simpleai.storage import Progress, Space, Storage


def sent_keys(storage: Storage) -> dict[str, int]:
    return storage.sizes("")


@pytest.mark.parametrize("megabytes", [0, 20])  # one PUT; three parts of a multipart upload
def test_a_project_is_packed_into_its_upload_under_the_sha256_of_its_tar(space, tmp_path, megabytes):
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    (project / "weights.bin").write_bytes(random.Random(7).randbytes(megabytes * packing.MiB))
    storage = Storage(space)
    listing = packing.list_project(project)
    sha, _ = packing.project_sha256(listing)
    sent = storage.upload_workdir(listing, sha, io.StringIO())
    key = packing.workdir_key(sha)
    assert sent_keys(storage) == {key: sent}
    body = storage.client.get_object(Bucket=space.bucket, Key=key)["Body"].read()
    packed = packing.pack(listing, into=tmp_path)
    assert body == packed.path.read_bytes() and packed.sha256 == sha  # the same bytes as packed to a file
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:  # what a node checks: the manifest of what it unpacks
        lines = [packing.manifest_entry("dir" if m.isdir() else "link" if m.issym() else "file", m.name, m.mode, m.size,
                                        m.linkname, hashlib.sha256(tar.extractfile(m).read()).hexdigest() if m.isfile() else "")
                 for m in tar]
    assert hashlib.sha256(packing.MANIFEST + b"".join(lines)).hexdigest() == sha


@pytest.mark.parametrize("megabytes", [0, 20])
def test_a_project_that_changed_since_its_address_leaves_nothing_in_the_bucket(space, tmp_path, megabytes):
    """A file written between the address and the packing: refused, and no object is made."""
    (tmp_path / "a.py").write_text("a = 1\n")
    (tmp_path / "weights.bin").write_bytes(random.Random(7).randbytes(megabytes * packing.MiB + 10))
    storage = Storage(space)
    listing = packing.list_project(tmp_path)
    sha, _ = packing.project_sha256(listing)
    (tmp_path / "weights.bin").write_bytes(random.Random(8).randbytes(megabytes * packing.MiB + 10))
    with pytest.raises(UsageError, match="weights.bin changed while it was being packed: run again"):
        storage.upload_workdir(listing, sha, io.StringIO())
    assert sent_keys(storage) == {}


def test_a_file_input_goes_under_its_sha256_with_its_name(space, tmp_path):
    data = tmp_path / "train.csv"
    data.write_text("a,b\n1,2\n")
    storage = Storage(space)
    first = storage.upload_input(data, io.StringIO())
    again = storage.upload_input(data, io.StringIO())
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    key = f"inputs/{digest}/train.csv"
    assert sent_keys(storage) == {key: 8}
    assert first.url == f"s3://{space.bucket}/{key}"
    assert (first.sent_files, again.sent_files, again.url) == (1, 0, first.url)


def test_a_directory_input_is_a_tree_under_its_manifests_sha256_and_only_missing_files_are_sent(space, tmp_path):
    root = tmp_path / "data"
    (root / "train").mkdir(parents=True)
    (root / "train" / "a.txt").write_text("alpha")
    (root / "b.txt").write_text("beta")
    storage = Storage(space)
    first = storage.upload_input(root, io.StringIO())
    prefix = first.url.removeprefix(f"s3://{space.bucket}/")
    assert first.url.endswith("/") and (first.files, first.sent_files, first.size) == (2, 2, 9)
    assert sent_keys(storage) == {prefix + "b.txt": 4, prefix + "train/a.txt": 5}
    # an upload cut short: the next run sends what is missing, nothing else
    storage.client.delete_object(Bucket=space.bucket, Key=prefix + "b.txt")
    again = storage.upload_input(root, io.StringIO())
    assert (again.url, again.sent_files, again.sent_bytes) == (first.url, 1, 4)
    (root / "b.txt").write_text("changed")
    assert storage.upload_input(root, io.StringIO()).url != first.url  # other contents, another tree


def test_a_prefix_downloads_by_its_relative_paths(space, tmp_path):
    storage = Storage(space)
    for key, body in {"jobs/7/attempt-1/master/model.pt": b"w" * 1000, "jobs/7/attempt-1/master/logs/loss.csv": b"1,2",
                      "jobs/70/other.txt": b"not this job's"}.items():
        storage.client.put_object(Bucket=space.bucket, Key=key, Body=body)
    files, size, _ = storage.download_prefix(f"s3://{space.bucket}/jobs/7", tmp_path / "out", io.StringIO())
    assert (files, size) == (2, 1003)
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file()) == [
        "attempt-1/master/logs/loss.csv", "attempt-1/master/model.pt"]
    assert storage.download_prefix(f"s3://{space.bucket}/jobs/8/", tmp_path / "none", io.StringIO()) == (0, 0, 0.0)


def test_wrong_keys_are_one_line_that_says_so(space, tmp_path):
    storage = Storage(Space(space.endpoint_url, space.bucket, space.access_key, "wrong-secret"))
    with pytest.raises(SimpleAIError, match=r"^your storage refused to look for s3://.*/workdirs/x.tar.gz \(\w+\)"):
        storage.exists("workdirs/x.tar.gz")


def test_an_unreachable_storage_is_one_line(space):
    storage = Storage(Space("http://127.0.0.1:9", space.bucket, "k", "s"))
    with pytest.raises(SimpleAIError, match="cannot reach your storage at http://127.0.0.1:9"):
        storage.exists("workdirs/x.tar.gz")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_bar_draws_on_a_terminal_only():
    ticks = iter([0.0, 1.0, 2.0, 3.0])
    shown = Terminal()
    bar = Progress(shown, "download", 4 * packing.MiB, clock=lambda: next(ticks))
    bar.add(2 * packing.MiB)
    bar.add(2 * packing.MiB)
    bar.finish()
    assert shown.getvalue() == ("\rdownload [############............]  50% 2.0 MB/4.0 MB 2.0 MB/s"
                                "\rdownload [########################] 100% 4.0 MB/4.0 MB 2.0 MB/s\n")
    quiet = io.StringIO()
    Progress(quiet, "download", 10).add(10)
    assert quiet.getvalue() == ""


def test_the_light_client_signs_odd_names_and_reads_every_page(space):
    from simpleai.s3lite import LightS3

    storage = Storage(space)
    keys = ["inputs/x/a b.txt", "inputs/x/ünï+cöde&=.csv", "inputs/x/sub/~tilde(1).bin", "inputs/y/other"]
    for key in keys:
        storage.client.put_object(Bucket=space.bucket, Key=key, Body=b"12")
    light = LightS3(space.endpoint_url, space.access_key, space.secret_key)
    assert light.list(space.bucket, "inputs/x/", page=2) == {key: 2 for key in keys[:3]}
    assert all(light.head(space.bucket, key) for key in keys)
    assert not light.head(space.bucket, "inputs/x/missing")


def test_unchanged_data_is_not_read_again_to_be_hashed(space, tmp_path, monkeypatch):
    from simpleai import storage as module

    root = tmp_path / "data"
    root.mkdir()
    (root / "a.txt").write_text("alpha")
    single = tmp_path / "one.csv"
    single.write_text("x,y\n")
    storage = Storage(space)
    first = (storage.upload_input(root, io.StringIO()), storage.upload_input(single, io.StringIO()))

    def no_reading(path):
        raise AssertionError(f"{path} was read again")

    monkeypatch.setattr(module, "file_sha256", no_reading)
    again = (storage.upload_input(root, io.StringIO()), storage.upload_input(single, io.StringIO()))
    assert [u.url for u in again] == [u.url for u in first] and [u.sent_files for u in again] == [0, 0]
    (root / "a.txt").write_text("omega")
    with pytest.raises(AssertionError, match="was read again"):
        storage.upload_input(root, io.StringIO())
