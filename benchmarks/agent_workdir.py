"""What a job's workdir and input cost on the node: first time (download, check, unpack) and
cached (nothing downloaded), for a 50 MB project of 2,000 files and an input of the same shape,
against a real SeaweedFS on loopback.

    .venv/bin/python -m benchmarks.agent_workdir [--files 2000] [--megabytes 50]

Prints one line per step; figures depend on the machine (loopback, local disk).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from console.services.objectstore import start_seaweedfs
from nodeagent.inputs import sync_inputs
from nodeagent.projects import copy_tree, ensure_project
from nodeagent.storage import S3Settings, Storage


def _project(files: int, total: int) -> tuple[bytes, dict[str, bytes]]:
    size = total // files
    contents = {f"pkg{index % 40}/module{index}.py": os.urandom(size // 2).hex().encode()[:size] for index in range(files)}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        for path in sorted(contents):
            info = tarfile.TarInfo(path)
            info.size, info.mtime = len(contents[path]), 0
            tar.addfile(info, io.BytesIO(contents[path]))
    return buffer.getvalue(), contents


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--megabytes", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        store = start_seaweedfs(root / "seaweedfs")
        try:
            client = store.client()  # type: ignore[no-untyped-call]
            client.create_bucket(Bucket="bench")
            data, contents = _project(args.files, args.megabytes * 1_000_000)
            sha = hashlib.sha256(data).hexdigest()
            client.put_object(Bucket="bench", Key=f"workdirs/{sha}.tar.gz", Body=data)
            for path, body in contents.items():
                client.put_object(Bucket="bench", Key=f"datasets/v1/{path}", Body=body)
            storage = Storage(S3Settings(store.endpoint, store.access_key, store.secret_key))
            placement = {"job_id": 1, "tenant": {"id": 1, "name": "bench"},
                         "workdir": {"url": f"s3://bench/workdirs/{sha}.tar.gz", "sha256": sha},
                         "inputs": [{"name": "train", "url": "s3://bench/datasets/v1/"}],
                         "storage": {"endpoint_url": store.endpoint, "bucket": "bench", "access_key": "", "secret_key": ""}}
            node = root / "node"
            print(f"project: {args.files} files, {sum(map(len, contents.values())) / 1e6:.1f} MB "
                  f"({len(data) / 1e6:.1f} MB packed); input: the same files as objects")
            for label in ("first job (download, check, unpack)", "second job (cached)"):
                started = time.monotonic()
                ready = ensure_project(node, placement, storage)  # type: ignore[arg-type]
                unpacked = time.monotonic()
                job = node / "jobs" / label.split()[0]
                job.mkdir(parents=True)
                copy_tree(ready.tree, job)
                copied = time.monotonic()
                print(f"workdir, {label}: {unpacked - started:.2f} s to have the tree, "
                      f"{copied - unpacked:.2f} s to copy it for the job, {copied - started:.2f} s in all")
            for label in ("first job (download)", "second job (cached)"):
                started = time.monotonic()
                sync_inputs(node, placement, storage, lambda _: None, "u1")  # type: ignore[arg-type]
                print(f"input, {label}: {time.monotonic() - started:.2f} s")
        finally:
            store.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
