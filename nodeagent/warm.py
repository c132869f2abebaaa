"""The warm pool on the node: a prepared environment kept between jobs of the same user.

After a placement is prepared (image pulled, training script and data downloaded), the files
of its working directory are copied to

    <work-dir>/warm/<key>/files/      key = sha256(owner, image, script_url)
    <work-dir>/warm/<key>/meta.json   which job prepared it, the script's ETag, when it was last used

and kept for the placement's keep-alive after it ends (protocol.WarmPool). When the console
places a later job of the same user with the same image and script on this node, it says so
(`reuse_from_job`); the runner then copies the kept files into the new working directory and
skips preparation altogether. The key includes the owner: one user's files are never handed
to another's job.

Files are hard-linked, not copied (falling back to a copy across file systems), so a warm
start costs the same for a 4 kB script and a 40 GB dataset. A command that rewrites a kept file
in place would change it for the next job too: the size and modification time of every kept
file are recorded, and an entry whose files changed is thrown away instead of reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .logstream import LogStream
from .protocol import Placement
from .storage import Storage, parse_s3_url

log = logging.getLogger(__name__)

EXPIRY_GRACE = 60.0  # seconds beyond the keep-alive, so the console's clock decides, not a race
StorageFactory = Callable[[], Storage | None]


def _root(work_dir: Path) -> Path:
    return work_dir / "warm"


def entry_dir(work_dir: Path, placement: Placement) -> Path | None:
    hint = placement.get("warm_pool")
    if not hint:
        return None
    key = f"{int(hint['owner'])}\0{placement.get('image', '')}\0{placement.get('script_url', '')}"
    return _root(work_dir) / hashlib.sha256(key.encode()).hexdigest()[:32]


def _read_meta(entry: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((entry / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None  # anything else was not written by this agent


def _write_meta(entry: Path, meta: dict[str, Any]) -> None:
    tmp = entry / "meta.json.tmp"
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, entry / "meta.json")


def _link_or_copy(source: str, target: str) -> str:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(source, target)
    return target


def _signature(files: Path) -> dict[str, list[int]]:
    """relative path → [size, mtime_ns] of every kept file: what `reuse` checks is unchanged."""
    signature = {}
    for path in sorted(p for p in files.rglob("*") if p.is_file()):
        stat = path.stat()
        signature[path.relative_to(files).as_posix()] = [stat.st_size, stat.st_mtime_ns]
    return signature


def _script_etag(storage_factory: StorageFactory, url: str) -> str:
    """The script's ETag in object storage ("" without a script); raises on storage errors."""
    if not url:
        return ""
    storage = storage_factory()
    if storage is None:
        return ""
    bucket, key = parse_s3_url(url)
    return str(storage.client.head_object(Bucket=bucket, Key=key).get("ETag", ""))


def sweep(work_dir: Path, now: float | None = None) -> list[str]:
    """Delete kept environments whose keep-alive has passed; returns their keys."""
    now = time.time() if now is None else now
    removed = []
    for entry in sorted(_root(work_dir).glob("*")):
        meta = _read_meta(entry)
        ended = meta.get("ended_at") if meta else None
        if meta is None and entry.name.endswith(".tmp"):
            try:
                ended = entry.stat().st_mtime  # a copy an agent crash left half-done
            except FileNotFoundError:  # a placement ending right now renamed or replaced its copy
                continue
        if ended is not None and now > ended + float((meta or {}).get("keep_alive_seconds", 0)) + EXPIRY_GRACE:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


async def reuse(placement: Placement, work_dir: Path, workdir: Path, log_stream: LogStream, storage_factory: StorageFactory,
                uses_image: bool = False) -> bool:
    """Fill `workdir` from a kept environment when the console asked for it; True when done.
    `uses_image`: the runtime runs the job's image (so a warm start has it on the node).

    A warm pool that fails must never fail the job (as in `remember`): another placement of the
    same key may replace or sweep the entry while this one reads it; the job then prepares cold."""
    try:
        return await _reuse(placement, work_dir, workdir, log_stream, storage_factory, uses_image)
    except Exception as exc:
        log.warning("job %s: the warm pool failed", placement["job_id"], exc_info=True)
        log_stream.info(f"The warm environment kept on this node could not be used ({exc}); preparing from scratch")
        return False


async def _reuse(placement: Placement, work_dir: Path, workdir: Path, log_stream: LogStream, storage_factory: StorageFactory,
                 uses_image: bool) -> bool:
    entry = entry_dir(work_dir, placement)
    hint = placement.get("warm_pool")
    if entry is None:
        return False
    await asyncio.to_thread(sweep, work_dir)
    if hint is None or hint.get("reuse_from_job") is None:
        return False
    meta = _read_meta(entry)
    if meta is None or not (entry / "files").is_dir():
        log_stream.info("No warm environment is kept on this node for this job (its keep-alive ended here); preparing it")
        return False
    try:
        etag = await asyncio.to_thread(_script_etag, storage_factory, placement.get("script_url", ""))
    except Exception as exc:  # the cold path's download says precisely what is wrong
        log_stream.warning(f"Could not check the training script in object storage ({exc}); preparing from scratch")
        return False
    if etag != meta.get("etag", ""):
        log_stream.info(f"The training script changed in object storage since job {meta.get('job_name')} prepared this node; preparing from scratch")
        return False
    if await asyncio.to_thread(_signature, entry / "files") != meta.get("files"):
        shutil.rmtree(entry, ignore_errors=True)
        log_stream.info(f"A job changed the files job {meta.get('job_name')} prepared on this node; preparing from scratch")
        return False
    try:
        await asyncio.to_thread(shutil.copytree, entry / "files", workdir, dirs_exist_ok=True, copy_function=_link_or_copy)
    except OSError as exc:  # replaced by a concurrent job of the same key meanwhile
        log_stream.info(f"The warm environment could not be linked ({exc}); preparing from scratch")
        return False
    _write_meta(entry, {**meta, "ended_at": None, "used_by": placement["job_id"]})
    log_stream.info(warm_start_line(meta, placement, uses_image))
    return True


def warm_start_line(meta: dict[str, Any], placement: Placement, uses_image: bool) -> str:
    """What a warm start really found on the node: the image only where the runtime uses one,
    the training script only where the job has one, other files only where there are some."""
    kept = []
    if uses_image and placement.get("image"):
        kept.append(f"the image {placement['image']}")
    files = len(meta.get("files") or {})
    if placement.get("script_url"):
        kept.append(f"the training script {placement['script_url'].rsplit('/', 1)[-1]}")
        files -= 1
    if files > 0:
        kept.append(f"{files} other file{'' if files == 1 else 's'} it prepared")
    said = f"Warm start: environment reused from job {meta.get('job_name')} (#{meta.get('job_id')})"
    if not kept:
        return f"{said}; this job has nothing to download (no training script or data)"
    listed = kept[0] if len(kept) == 1 else ", ".join(kept[:-1]) + " and " + kept[-1]
    return f"{said}; already on this node: {listed}"


def _keep_prepared(workdir: Path, target: Path) -> None:
    output = workdir / "output"
    shutil.copytree(
        workdir, target, copy_function=_link_or_copy,
        ignore=lambda folder, names: ["output"] if Path(folder) == workdir and output.exists() else [],
    )


async def remember(placement: Placement, work_dir: Path, workdir: Path, storage_factory: StorageFactory) -> None:
    """Keep what preparation put into `workdir` for the next job of the same key (atomic swap)."""
    entry = entry_dir(work_dir, placement)
    if entry is None:
        return
    hint = placement["warm_pool"]
    try:
        etag = await asyncio.to_thread(_script_etag, storage_factory, placement.get("script_url", ""))
        # one copy per placement: two jobs of the same key may end on this node at once
        tmp = entry.with_name(f"{entry.name}.{placement['job_id']}-{placement['attempt']}-{placement['role']}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        await asyncio.to_thread(_keep_prepared, workdir, tmp / "files")
        _write_meta(tmp, {
            "job_id": placement["job_id"], "job_name": placement["job_name"], "owner": hint["owner"],
            "image": placement.get("image", ""), "script_url": placement.get("script_url", ""), "etag": etag,
            "files": await asyncio.to_thread(_signature, tmp / "files"),
            "keep_alive_seconds": hint.get("keep_alive_seconds", 0), "prepared_at": time.time(), "ended_at": None,
        })
        shutil.rmtree(entry, ignore_errors=True)
        try:
            os.replace(tmp, entry)
        except OSError:  # another job of the same key kept its copy in between: one is enough
            shutil.rmtree(tmp, ignore_errors=True)
            log.info("job %s: another job's environment of the same key was kept first", placement["job_id"])
    except Exception:  # a warm pool that fails must never fail the job
        log.warning("could not keep the environment of job %s for the warm pool", placement["job_id"], exc_info=True)


def release(placement: Placement, work_dir: Path) -> None:
    """The placement ended: its keep-alive starts now."""
    entry = entry_dir(work_dir, placement)
    meta = _read_meta(entry) if entry is not None else None
    if entry is None or meta is None or placement["job_id"] not in (meta.get("job_id"), meta.get("used_by")):
        return  # kept by another job (this one failed before it prepared or reused anything)
    hint = placement["warm_pool"]
    with contextlib.suppress(OSError):
        _write_meta(entry, {
            **meta, "ended_at": time.time(), "keep_alive_seconds": hint.get("keep_alive_seconds", 0),
            "job_id": placement["job_id"], "job_name": placement["job_name"],
        })
