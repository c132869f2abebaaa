"""A changed 50 MB project of 2,000 files, this commit's way against an older commit's, interleaved
in one process against one SeaweedFS: what the laptop spends before it can create the job (pack and
upload), and what a node spends before the command can start (download, check, unpack, the job's
view). Prints medians; asserts nothing.

Run: `git worktree add /tmp/baseline 974e17e` (or `git archive 974e17e | tar -x -C /tmp/baseline`),
then `.venv/bin/python -m benchmarks.workdir_ab --baseline /tmp/baseline [--runs 5]`.

The baseline is the commit before issue 33's speed work: it packed to a temporary file (SHA-256 of
the .tar.gz) and sent it with one PUT, and the node downloaded to a file, hashed it, unpacked it and
copied the tree into the job's directory. This commit: the address from the files' digests (only
changed files read), packed straight into a multipart upload; the node unpacks while it
downloads, and under the sandbox a job's project is a copy-on-write view (no copy: 0 s here).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from benchmarks._stack import ROOT
from benchmarks.cli_workdir import make_project
from console.services.objectstore import start_seaweedfs
from nodeagent import projects
from simpleai import cache, packing
from simpleai.storage import Space, Storage

BUCKET = "bench-workdirs"


def load(tree: Path, name: str, alias: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(alias, tree / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    spec.loader.exec_module(module)
    return module


class _NodeStorage:
    def __init__(self, client: object) -> None:
        self.client = client


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout of the older commit")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    old_packing = load(args.baseline, "simpleai/packing.py", "simpleai.packing_old")
    old_s3 = load(args.baseline, "simpleai/s3lite.py", "simpleai.s3lite_old")
    old_node = load(args.baseline, "nodeagent/projects.py", "nodeagent.projects_old")
    tmp = Path(tempfile.mkdtemp(prefix="simpleai-workdir-ab-"))
    store = start_seaweedfs(tmp / "s3")
    try:
        client = store.client()
        client.create_bucket(Bucket=BUCKET)
        storage = Storage(Space(store.endpoint, BUCKET, store.access_key, store.secret_key))
        light = old_s3.LightS3(store.endpoint, store.access_key, store.secret_key)
        project = tmp / "project"
        files, size = make_project(project)
        env = {"XDG_CACHE_HOME": str(tmp / "cache")}
        listing = packing.list_project(project)
        cache.remember_files(env, listing, packing.project_sha256(listing)[1])  # as after an earlier run
        times: dict[str, list[float]] = {}
        print(f"project: {files} files, {size / 2**20:.1f} MiB; {args.runs} runs, interleaved; load {os.getloadavg()[0]:.1f}")
        for run in range(args.runs):
            (project / "version.txt").write_text(f"{run} {time.time()}\n")  # one changed file: a new project
            started = time.perf_counter()
            old_listing = old_packing.list_project(project)
            packed = old_packing.pack(old_listing)
            light.put_file(BUCKET, packed.key, packed.path)
            times.setdefault("laptop, before", []).append(time.perf_counter() - started)
            old_key, old_sha = packed.key, packed.sha256
            packed.path.unlink()
            started = time.perf_counter()
            listing = packing.list_project(project)
            sha, digests = packing.project_sha256(listing, cache.known_files(env, listing))
            cache.remember_files(env, listing, digests)
            storage.upload_workdir(listing, sha, io.StringIO())
            times.setdefault("laptop, now", []).append(time.perf_counter() - started)
            node = tmp / f"node-{run}"
            placement = {"job_id": run, "tenant": {"id": 1}, "workdir": {"url": f"s3://{BUCKET}/{old_key}", "sha256": old_sha}}
            started = time.perf_counter()
            ready = old_node.ensure_project(node / "before", placement, _NodeStorage(client))
            (node / "job-before").mkdir(parents=True)
            old_node.copy_tree(ready.tree, node / "job-before")
            times.setdefault("node, before", []).append(time.perf_counter() - started)
            placement = {"job_id": run, "tenant": {"id": 1},
                         "workdir": {"url": f"s3://{BUCKET}/{packing.workdir_key(sha)}", "sha256": sha}}
            started = time.perf_counter()
            projects.ensure_project(node / "now", placement, _NodeStorage(client))  # type: ignore[arg-type]
            times.setdefault("node, now", []).append(time.perf_counter() - started)
            shutil.rmtree(node)
        for what, values in times.items():
            print(f"  {what:16} median {statistics.median(values):5.2f} s  ({', '.join(f'{v:.2f}' for v in values)})")
        print(f"load after: {os.getloadavg()[0]:.1f}")
    finally:
        store.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
