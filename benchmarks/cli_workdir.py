"""`simpleai run --workdir` of a 50 MB project of 2,000 files: time from the command to the job's
first line, side by side with the same job whose script is already uploaded. Prints figures and
ratios; asserts nothing.

Run: `.venv/bin/python -m benchmarks.cli_workdir [--runs 3]`. A real daphne, Celery worker and
beat, SeaweedFS and one node agent (process runtime); the real `simpleai` command as a
subprocess, as on a laptop. Each run, in turn:

  script   `simpleai run job.yaml --follow` where job.yaml names the script already in the
           user's storage (script_url): the baseline;
  workdir  `simpleai run --workdir PROJECT --follow -- python train.py` after one file of the
           project changed: packed, uploaded, downloaded and unpacked by the node;
  again    the same command on the unchanged project: nothing is uploaded (checked: the
           command says "already uploaded" and no object is added) and the node has the tree.

Issue 33's target: workdir ≤ 2 × script.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._stack import ROOT, BenchStack, api_user

FIRST_LINE = "first-line-of-the-job"
TRAIN = f"print({FIRST_LINE!r}, flush=True)\n"


def make_project(root: Path, files: int = 2000, total_mb: int = 50) -> tuple[int, int]:
    """A project like a training repository: mostly small source files, some bigger binary ones
    (vocabularies, small weights), `files` files and `total_mb` MiB in all; (files, bytes)."""
    rng = random.Random(33)
    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text(TRAIN)
    binaries = 100
    sources = files - binaries - 2
    source_bytes = 4_000
    binary_bytes = (total_mb * 2**20 - sources * source_bytes) // binaries
    words = ["def", "return", "self", "tensor", "layer", "model", "batch", "import", "torch", "loss", "=", "(", ")", ":"]
    for i in range(sources):
        text = " ".join(rng.choice(words) for _ in range(source_bytes // 4))
        (root / "src" / f"module_{i:04d}.py").write_text(text[:source_bytes].ljust(source_bytes))
    (root / "assets").mkdir(exist_ok=True)
    for i in range(binaries):
        (root / "assets" / f"blob_{i:03d}.bin").write_bytes(rng.randbytes(binary_bytes))
    (root / "version.txt").write_text("0\n")
    count = sum(1 for path in root.rglob("*") if path.is_file())
    size = sum(path.stat().st_size for path in root.rglob("*") if path.is_file())
    return count, size


def timed_run(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, float, str]:
    """Seconds from starting `simpleai ARGV` to the new job's id (the laptop's part: packing,
    uploading, creating), to the job's first log line (the node's preparation) and to the
    command's own first line; its stderr."""
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "simpleai", *argv], cwd=cwd, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    created = logged = first = None
    for line in process.stdout:
        if created is None:
            created = time.perf_counter() - started  # `run` prints the id first
        elif logged is None:
            logged = time.perf_counter() - started
        if first is None and line.strip() == FIRST_LINE:
            first = time.perf_counter() - started
    _, err = process.communicate(timeout=300)
    if process.returncode != 0 or first is None or created is None or logged is None:
        raise SystemExit(f"simpleai {' '.join(argv)} failed ({process.returncode}): {err}")
    return created, logged, first, err


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with BenchStack() as stack:
        from jobs.storage import iam
        from jobs.storage.spaces import ensure_space

        user, token = api_user()
        stack.start_agents(["bench-a"])

        project = stack.tmp / "project"
        files, size = make_project(project)
        script_url = stack.upload_as(user, "uploads/train.py", project / "train.py")
        job_file = stack.tmp / "script-job.yaml"
        job_file.write_text(f"image_url: trainer:1\nscript_url: {script_url}\ncommand: python train.py\n")
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("SIMPLEAI_")},
               "SIMPLEAI_URL": stack.url, "SIMPLEAI_TOKEN": token, "PYTHONPATH": str(ROOT),
               "XDG_CONFIG_HOME": str(stack.tmp / "config")}
        space = ensure_space(user.pk)
        s3 = iam.s3_as(space.access_key, space.secret_key, stack.store.endpoint)

        def workdirs() -> int:
            return s3.list_objects_v2(Bucket=space.bucket, Prefix="workdirs/").get("KeyCount", 0)

        print(f"project: {files} files, {size / 2**20:.1f} MiB; {args.runs} runs of each, interleaved")
        rows: list[tuple[tuple[float, float, float], ...]] = []
        uploads_on_again = 0
        print("  (each: seconds to the job's id (the laptop's part) / its first log line / the command's first line)")
        for run in range(args.runs):
            *script, _ = timed_run(["run", str(job_file), "--name", f"script-{run}", "--follow"], env, stack.tmp)
            (project / "version.txt").write_text(f"{run} {time.time()}\n")  # a new project: uploaded again
            argv = ["--image", "trainer:1", "--workdir", str(project), "--follow", "--", "python", "train.py"]
            *workdir, err = timed_run(["run", "--name", f"workdir-{run}", *argv], env, stack.tmp)
            assert ", uploaded in " in err, err
            uploaded = next(line for line in err.splitlines() if "workdir:" in line)
            before = workdirs()
            *again, err = timed_run(["run", "--name", f"again-{run}", *argv], env, stack.tmp)
            if "already uploaded" not in err or workdirs() != before:
                uploads_on_again += 1
            print(f"  run {run + 1}: script {fmt(script)}   workdir {fmt(workdir)}   again {fmt(again)}")
            print(f"         {uploaded.removeprefix('simpleai: ')} | again: "
                  f"{next(line for line in err.splitlines() if 'workdir:' in line).removeprefix('simpleai: ')}")
            rows.append((tuple(script), tuple(workdir), tuple(again)))

        script_m, workdir_m, again_m = ([statistics.median(row[kind][i] for row in rows) for i in range(3)] for kind in range(3))
        for i, what in ((1, "first log line"), (2, "command's first line")):
            print(f"median time to the {what}: script already uploaded {script_m[i]:.2f} s, --workdir (new project) "
                  f"{workdir_m[i]:.2f} s ({workdir_m[i] / script_m[i]:.2f}×; target ≤ 2×), --workdir unchanged "
                  f"{again_m[i]:.2f} s ({again_m[i] / script_m[i]:.2f}×)")
        print(f"second runs that uploaded something: {uploads_on_again} of {args.runs}")


def fmt(times: list[float]) -> str:
    return "/".join(f"{value:5.2f}" for value in times) + " s"


if __name__ == "__main__":
    main()
