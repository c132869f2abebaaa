"""A placement's OUTPUT_DIR, uploaded to object storage once its command has exited."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from .logstream import LogStream
from .protocol import Placement
from .storage import Storage, StorageError, has_regular_files


async def upload_output(placement: Placement, role_dir: str, output_dir: Path, storage: Callable[[], Storage | None],
                        log: LogStream) -> tuple[str, str]:
    """Upload OUTPUT_DIR to `<output_prefix>/<role>`; returns (output_url or "", error or "").

    The role keeps the nodes of one attempt from overwriting each other's files (every
    rank-0-of-its-node writes e.g. model.pt); the console derives the job's result URL
    from the output_url by dropping `attempt-N/<role>`. `storage` is blocking (run in a thread).
    """
    base = placement.get("output_prefix") or ""
    if not base:
        return "", ""
    prefix = f"{base.rstrip('/')}/{role_dir}"
    if not await asyncio.to_thread(has_regular_files, output_dir):
        log.info("OUTPUT_DIR is empty: nothing to upload")
        return "", ""
    try:
        client = await asyncio.to_thread(storage)
        if client is None:
            raise StorageError("the placement carries no object-storage credentials")
        uploaded = await asyncio.to_thread(client.upload_tree, output_dir, prefix)
    except StorageError as exc:
        log.error(f"Output not uploaded to {prefix}: {exc}")
        return "", f"output not uploaded to {prefix}: {exc}"
    log.info(f"Output uploaded to {prefix} ({uploaded.describe()})")
    return prefix, ""
