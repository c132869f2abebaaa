"""The last thing `make run` prints: a box with the console's address, the admin password and
the object storage a user uploads training scripts to (a pure function; devserver prints it
once everything has started, so the box is not lost among the start-up lines)."""

from __future__ import annotations

from collections.abc import Mapping

SCRIPT_URL = "s3://scripts/train.py"  # the example of the box and of the README


def ready_banner(console_url: str, admin_note: str, storage: Mapping[str, str], storage_is_local: bool) -> str:
    """`admin_note` is what `manage.py ensure_admin` said; `storage` holds S3_ENDPOINT_URL,
    S3_ACCESS_KEY and S3_SECRET_KEY. An external store's secret is not printed (its owner set it)."""
    endpoint = storage.get("S3_ENDPOINT_URL", "")
    key = storage.get("S3_ACCESS_KEY", "")
    secret = storage.get("S3_SECRET_KEY", "") if storage_is_local else "(as set in S3_SECRET_KEY)"
    lines = [
        "Simple AI Training is running.  Ctrl-C stops everything.",
        "",
        f"Console       {console_url}",
        *(f"Admin         {line}" if i == 0 else f"              {line}"
          for i, line in enumerate(admin_note.strip().splitlines() or ["(no administrator was created)"])),
        "",
    ]
    if endpoint:
        lines += [
            f"Object storage (S3) {'— local SeaweedFS' if storage_is_local else ''}".rstrip(),
            f"  endpoint    {endpoint}",
            f"  access key  {key}",
            f"  secret key  {secret}",
            "",
            "Upload a training script, then use its URL in the job's Training script field:",
            f"  export AWS_ACCESS_KEY_ID={key} AWS_SECRET_ACCESS_KEY={secret if storage_is_local else '…'}",
            f"  aws --endpoint-url {endpoint} s3 mb s3://scripts",
            f"  aws --endpoint-url {endpoint} s3 cp train.py {SCRIPT_URL}",
            "  (or boto3: see \"Upload a training script\" in README.md)",
        ]
    else:
        lines.append("Object storage: none configured (S3_ENDPOINT_URL), so jobs cannot use a training script URL.")
    return box(lines)


def box(lines: list[str]) -> str:
    width = max(len(line) for line in lines)
    top, bottom = "╔" + "═" * (width + 2) + "╗", "╚" + "═" * (width + 2) + "╝"
    return "\n".join([top, *(f"║ {line.ljust(width)} ║" for line in lines), bottom])
