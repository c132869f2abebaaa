"""From a job file's and the flags' local things to the API's fields: the project directory packed
and uploaded (`workdir` → `workdir_url`), local inputs uploaded (`inputs` → [{name, url}]), and
the job to start from by id (`from_checkpoint`).

Two steps, so that nothing is uploaded for a job the console would refuse anyway:
`local_checks` (no network: the paths exist, the project is under the size cap) and `upload`
(the user's own keys; what is there already is not sent again).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from . import cache, packing
from .api_types import JobFields
from .client import Client
from .errors import UsageError
from .jobfile import is_s3
from .packing import human
from .storage import Storage


@dataclass
class Local:
    """What of a job is on the laptop, checked: the project's listing and the local inputs."""

    fields: JobFields  # the API's fields, without workdir; inputs that are s3:// URLs only
    workdir: packing.Listing | None = None
    inputs: dict[str, str] = field(default_factory=dict)  # every input by name: an s3:// URL or a local path


def local_checks(fields: JobFields, env: Mapping[str, str] | None = None) -> Local:
    """Read the project (its ignore files, the size cap) and check the local inputs exist."""
    fields = dict(fields)
    workdir = fields.pop("workdir", None)
    inputs = fields.pop("inputs", None) or {}
    listing = None
    if workdir is not None:
        listing = packing.list_project(Path(workdir))
        packing.check_size(listing, packing.max_bytes(dict(env) if env is not None else None))
    for name, value in inputs.items():
        if not is_s3(value) and not os.path.exists(value):
            raise UsageError(f"input {name}: {value} does not exist")
    fields.update(_api_inputs({name: url for name, url in inputs.items() if is_s3(url)}))
    return Local(fields, listing, dict(inputs))


def _api_inputs(inputs: Mapping[str, str]) -> JobFields:
    return {"inputs": [{"name": name, "url": url} for name, url in inputs.items()]} if inputs else {}


def resolve_checkpoint(fields: JobFields, client: Client) -> JobFields:
    """`from_checkpoint` given as a job's name becomes its id (the API takes ids)."""
    ref = fields.get("from_checkpoint")
    if ref is None or ref == "" or isinstance(ref, int):
        return fields
    return {**fields, "from_checkpoint": client.find_job(str(ref))["id"]}


def upload(local: Local, client: Client, err: TextIO, note: Callable[[str], None], dry_run: bool = False,
           env: Mapping[str, str] | None = None) -> JobFields:
    """The job's fields with the project and the local inputs in the caller's storage (on a dry
    run: where they would be, and whether they are there already). `env` locates the cache of
    packed projects (simpleai.cache)."""
    fields = dict(local.fields)
    if local.workdir is None and all(is_s3(value) for value in local.inputs.values()):
        return fields
    storage = Storage(client.storage_space())
    if local.workdir is not None:
        fields["workdir_url"] = _upload_workdir(storage, local.workdir, err, note, dry_run, os.environ if env is None else env)
    inputs = {}
    for name, value in local.inputs.items():
        inputs[name] = value if is_s3(value) else _upload_input(storage, name, Path(value), err, note, dry_run, env)
    fields.update(_api_inputs(inputs))
    return fields


def _upload_workdir(storage: Storage, listing: packing.Listing, err: TextIO, note: Callable[[str], None],
                    dry_run: bool, env: Mapping[str, str]) -> str:
    started = time.monotonic()
    for link in listing.skipped_links[:5]:
        note(f"left out a link that leads out of the project: {link}")
    what = f"workdir: {len(listing.files)} files, {human(listing.size)}"
    # unchanged since it was packed, and still in the storage: neither packed nor sent again
    fingerprint = packing.fingerprint(listing)
    known = cache.packed_sha256(env, fingerprint)
    if known and storage.exists(packing.workdir_key(known)):
        note(f"{what}, already uploaded" + (f": {storage.space.url(packing.workdir_key(known))}" if dry_run else ""))
        return storage.space.url(packing.workdir_key(known))
    # the address first (only changed files are read): a project that is there already is not packed
    if known:
        sha = known
    else:
        sha, digests = packing.project_sha256(listing, cache.known_files(env, listing))
        cache.remember_files(env, listing, digests)
    cache.remember(env, fingerprint, sha)
    url = storage.space.url(packing.workdir_key(sha))
    if storage.exists(packing.workdir_key(sha)):
        note(f"{what}, already uploaded" + (f": {url}" if dry_run else ""))
    elif dry_run:
        note(f"{what}, not uploaded (a dry run): {url}")
    else:
        sent = storage.upload_workdir(listing, sha, err)
        note(f"{what} ({human(sent)} packed), uploaded in {time.monotonic() - started:.1f} s")
    return url


def _upload_input(storage: Storage, name: str, path: Path, err: TextIO, note: Callable[[str], None], dry_run: bool,
                  env: Mapping[str, str] | None) -> str:
    done = storage.upload_input(path, err, dry_run, env)
    if done.sent_files:
        state = (f"{'not uploaded (a dry run): would send' if dry_run else 'uploaded'} "
                 f"{done.sent_files} file{'s' if done.sent_files != 1 else ''} ({human(done.sent_bytes)})")
    else:
        state = "already uploaded"
    note(f"input {name}: {done.files} file{'s' if done.files != 1 else ''}, {human(done.size)}, {state}")
    return done.url
