"""The last thing `make run` prints: a box with the console's address, the admin password and
the object storage, and where a user finds their own keys to upload training scripts (a pure
function; devserver prints it once everything has started, so the box is not lost among the
start-up lines)."""

from __future__ import annotations

from collections.abc import Mapping


def ready_banner(console_url: str, admin_note: str, storage: Mapping[str, str], storage_is_local: bool,
                 log_dir: str = "") -> str:
    """`admin_note` is what `manage.py ensure_admin` said; `storage` holds S3_ENDPOINT_URL;
    `log_dir` is where the processes' output goes (one file each), if not to the terminal. The
    console's own storage keys are not printed: they never leave the console, and each user
    uploads with keys of their own, from their account page."""
    endpoint = storage.get("S3_ENDPOINT_URL", "")
    lines = [
        "Simple AI Training is running.  Ctrl-C stops everything.",
        "",
        f"Console       {console_url}",
        *(f"Admin         {line}" if i == 0 else f"              {line}"
          for i, line in enumerate(admin_note.strip().splitlines() or ["(no administrator was created)"])),
        "",
    ]
    if log_dir:
        lines += [
            f"Logs          {log_dir}/  (one file a process: daphne, celery-*, local-node-*)",
            f"              tail -f {log_dir}/*.log",
            "",
        ]
    if endpoint:
        lines += [
            f"Object storage (S3) {'— local SeaweedFS' if storage_is_local else ''}".rstrip(),
            f"  endpoint    {endpoint}",
            "",
            "Each user has a bucket and keys of their own: upload training scripts there",
            f"  {console_url.rstrip('/')}/account/   (keys, an upload form, aws cli and boto3 lines)",
            "  and use the s3:// URL it shows in the job's Training script field.",
        ]
    else:
        lines.append("Object storage: none configured (S3_ENDPOINT_URL), so jobs cannot use a training script URL.")
    return box(lines)


def box(lines: list[str]) -> str:
    width = max(len(line) for line in lines)
    top, bottom = "╔" + "═" * (width + 2) + "╗", "╚" + "═" * (width + 2) + "╝"
    return "\n".join([top, *(f"║ {line.ljust(width)} ║" for line in lines), bottom])
