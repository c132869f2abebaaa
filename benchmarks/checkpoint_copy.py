"""What `from_checkpoint` adds to a job's creation: copying the source's newest checkpoint into
the new job's prefix (jobs.storage.checkpoint_copy: server-side CopyObject per file, multipart
copy above boto3's threshold, the manifest verified and re-signed), side by side with uploading
the same bytes (what the checkpoint cost the source job).

Run: `.venv/bin/python benchmarks/checkpoint_copy.py [--sizes-mb 16,128,384] [--files 4]`. A fresh
SeaweedFS of its own; prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")  # read by settings, not used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="16,128,384", help="checkpoint sizes, comma-separated")
    parser.add_argument("--files", type=int, default=8, help="shard files per checkpoint")
    args = parser.parse_args()
    import django

    django.setup()
    from django.conf import settings

    from console.services.objectstore import start_seaweedfs
    from jobs.storage import checkpoint_copy, iam
    from nodeagent.checkpoint_trust import signing

    store = start_seaweedfs(Path(tempfile.mkdtemp(prefix="simpleai-ckpt-copy-")))
    settings.S3_ENDPOINT_URL, settings.S3_ACCESS_KEY, settings.S3_SECRET_KEY = store.endpoint, store.access_key, store.secret_key
    settings.S3_TENANT_BUCKET_PREFIX = "bench"
    client = iam.admin_s3()
    owner, bucket = 1, "bench-u1"
    client.create_bucket(Bucket=bucket)
    source_key, target_key = os.urandom(32).hex(), os.urandom(32).hex()
    rows = []
    try:
        for number, size_mb in enumerate(int(s) for s in args.sizes_mb.split(",")):
            source, target, step = 100 + number, 200 + number, 40
            prefix = f"jobs/{source}/checkpoints/step-{step}/"
            part = os.urandom(1 << 20) * max(1, size_mb // args.files)
            entries = []
            started = time.perf_counter()
            for rank in range(args.files):
                name = f"rank-{rank:05d}.shard"
                client.put_object(Bucket=bucket, Key=prefix + name, Body=part)
                entries.append({"name": name, "rank": rank, "bytes": len(part), "crc32": 0, "kind": "shard",
                                "sha256": [[len(part), hashlib.sha256(part).hexdigest()]]})
            manifest = {"step": step, "world_size": args.files, "time": "", "created": time.time(), "files": entries,
                        "metadata": {}, "format": 2}
            client.put_object(Bucket=bucket, Key=prefix + "MANIFEST.json",
                              Body=json.dumps(signing.sign(manifest, bytes.fromhex(source_key))).encode())
            uploaded = time.perf_counter() - started
            started = time.perf_counter()
            copied = checkpoint_copy.copy_checkpoint(owner, source, target, step, source_key, target_key, client=client)
            seconds = time.perf_counter() - started
            rows.append((copied.bytes / (1 << 20), copied.files, uploaded, seconds))
    finally:
        store.stop()
    print(f"{'checkpoint':>11} {'files':>5} {'upload (s)':>10} {'copy (s)':>9} {'copy MB/s':>9}")
    for mb, files, uploaded, seconds in rows:
        print(f"{mb:>8.0f} MB {files:>5} {uploaded:>10.2f} {seconds:>9.2f} {mb / seconds:>9.0f}")


if __name__ == "__main__":
    main()
