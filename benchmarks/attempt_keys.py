"""What an attempt's own storage keys cost: minting (CreateUser, PutUserPolicy, CreateAccessKey)
and revoking (DeleteUser) through SeaweedFS's IAM API, as jobs.storage.iam does them, with N
other identities already there (SeaweedFS rewrites all of them on every IAM write).

Run: `.venv/bin/python -m benchmarks.attempt_keys [--rounds 20] [--existing 0,50,200]`. A fresh
SeaweedFS of its own; prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")  # read by settings, not used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--existing", default="0,50,200", help="other identities present, comma-separated")
    args = parser.parse_args()
    import django

    django.setup()
    from django.conf import settings

    from console.services.objectstore import start_seaweedfs
    from jobs.storage import iam

    store = start_seaweedfs(Path(tempfile.mkdtemp(prefix="simpleai-keys-")))
    settings.S3_ENDPOINT_URL, settings.S3_ACCESS_KEY, settings.S3_SECRET_KEY = store.endpoint, store.access_key, store.secret_key
    rows, made = [], 0
    try:
        for existing in [int(n) for n in args.existing.split(",")]:
            while made < existing:
                iam._iam().create_user(UserName=f"filler-{made}")  # bare: only its being there counts
                made += 1
            mint, revoke = [], []
            for n in range(args.rounds):
                name = f"job-{existing}-a{n}"
                began = time.perf_counter()
                iam.create_identity(name, iam.attempt_policy("simpleai-u1", existing), iam.new_access_key("J"), iam.new_secret_key())
                mint.append(time.perf_counter() - began)
                began = time.perf_counter()
                iam.delete_identity(name)
                revoke.append(time.perf_counter() - began)
            rows.append((existing, mint, revoke))
    finally:
        store.stop()
    print(f"\nAttempt keys through SeaweedFS's IAM API ({args.rounds} mints and revocations per row; ms)")
    print(f"  {'other identities':>16}  {'mint median':>11} {'mint p90':>9}  {'revoke median':>13} {'revoke p90':>10}")
    for existing, mint, revoke in rows:
        p90 = lambda values: sorted(values)[int(len(values) * 0.9) - 1]  # noqa: E731
        print(f"  {existing:>16}  {statistics.median(mint) * 1000:>11.1f} {p90(mint) * 1000:>9.1f}  "
              f"{statistics.median(revoke) * 1000:>13.1f} {p90(revoke) * 1000:>10.1f}")


if __name__ == "__main__":
    main()
